"""Embedding matrices made by ``data_tools`` (static_embeddings, source_embeddings, align_embeddings), read
with numpy: ``NAME.npy`` (float32 [vocab, dim], row i = token id i) + the ``NAME.json`` sidecar
(docs/embedding_format.md). The reader checks the array's sha256, its row count and the tokenizer identity the
sidecar records, so rows are never applied to another vocabulary; xpt_ds does not import data_tools.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xpt_ds.config import ConfigError
from xpt_ds.io.digest import sha256_file

EMBEDDING_FORMAT = "xpt-static-embeddings"
# The files that define a Hugging Face tokenizer; a sidecar's "hf" identity hashes those a directory holds
# (the same list and hash as data_tools/piece_tokenizers.py, which xpt_ds does not import).
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                      "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
                      "tokenizer.model")


def hf_tokenizer_sha256(directory: Path | str) -> str | None:
    """The sidecar's ``hf`` tokenizer identity of a local directory (None for a hub id)."""
    d = Path(directory)
    if not d.is_dir():
        return None
    files = {p.name: sha256_file(p) for p in sorted(d.iterdir()) if p.name in HF_TOKENIZER_FILES}
    return hashlib.sha256("".join(f"{n}:{s}\n" for n, s in files.items()).encode()).hexdigest()


def target_identity(tok) -> tuple[str | None, str]:
    """(sha256, kind) of the tokenizer identity a sidecar over the target ids records: data_tools writes a
    SentencePiece model file as ``sentencepiece`` (the file's sha256) and a Hugging Face tokenizer directory (method
    extend's, from ``xpt-data extend-vocab``) as ``hf`` (``hf_tokenizer_sha256``)."""
    if tok.kind == "huggingface":
        return hf_tokenizer_sha256(tok.path), "hf"
    return sha256_file(tok.path), "sentencepiece"


@dataclass
class MatrixFile:
    path: Path  # the .npy
    matrix: np.ndarray  # float32 [rows, dim]
    meta: dict  # the sidecar
    seen: np.ndarray  # bool [rows]: rows with a trained vector (not in unseen_ids)


def read_matrix(path: str, key: str, rows: int, tokenizer_sha256: str | None, tokenizer_kind: str,
                tokenizer_key: str = "tokenizer") -> MatrixFile:
    """``NAME.npy`` + ``NAME.json``, checked: the sidecar's sha256 of the array, ``rows`` rows and the tokenizer
    identity ``meta[tokenizer_key]`` (kind and sha256; the sha256 check is skipped when ``tokenizer_sha256`` is
    None, a hub id). Every problem is a one-line ConfigError naming the file and ``key``."""
    p = Path(path)
    npy = p.with_suffix(".npy") if p.suffix == ".json" else p
    sidecar = npy.with_suffix(".json")
    where = f"config key 'model.embedding_init_args.{key}': {npy}"
    if not npy.is_file() or not sidecar.is_file():
        raise ConfigError(f"{where}: {'file' if not npy.is_file() else 'sidecar ' + sidecar.name} not found")
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise ConfigError(f"{where}: sidecar {sidecar.name} does not parse ({str(e).splitlines()[0]})") from None
    if not isinstance(meta, dict) or meta.get("format") != EMBEDDING_FORMAT:
        raise ConfigError(f"{where}: sidecar {sidecar.name} is not an {EMBEDDING_FORMAT} file")
    if meta.get("npy_sha256") != sha256_file(npy):
        raise ConfigError(f"{where} does not match its sidecar {sidecar.name} (sha256 differs)")
    try:
        matrix = np.load(npy, allow_pickle=False)
    except (ValueError, EOFError) as e:  # EOFError: an empty file
        raise ConfigError(f"{where}: not a .npy array ({e})") from None
    if matrix.ndim != 2 or matrix.dtype.kind != "f":
        raise ConfigError(f"{where}: expected a 2-D float matrix, got {matrix.dtype} {matrix.shape}")
    if matrix.shape[0] != rows:
        raise ConfigError(f"{where} has {matrix.shape[0]} rows but the vocabulary has {rows}")
    ident = meta.get(tokenizer_key) or {}
    if ident.get("kind") != tokenizer_kind:
        raise ConfigError(f"{where}: rows are ids of a {ident.get('kind')!r} tokenizer, expected {tokenizer_kind}")
    if tokenizer_sha256 is not None and ident.get("sha256") != tokenizer_sha256:
        raise ConfigError(f"{where} was made for another tokenizer ({ident.get('path')}, sha256 "
                          f"{str(ident.get('sha256'))[:12]}… vs {tokenizer_sha256[:12]}…)")
    bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
    if bad.size:
        raise ConfigError(f"{where}: {bad.size} row(s) are not finite (NaN or inf), e.g. row {int(bad[0])}")
    seen = np.ones(rows, dtype=bool)
    seen[_unseen_ids(meta, rows, f"{where}: sidecar {sidecar.name}")] = False
    return MatrixFile(npy, matrix.astype(np.float32, copy=False), meta, seen)


def _unseen_ids(meta: dict, rows: int, where: str) -> list[int]:
    """The sidecar's ``unseen_ids``, checked: numpy would index with a negative id from the end (marking the last
    rows unseen) and fail on others with a traceback."""
    ids = meta.get("unseen_ids", [])
    if not isinstance(ids, list):
        raise ConfigError(f"{where}: 'unseen_ids' must be a list of row ids, got {json.dumps(ids)[:40]}")
    bad = [i for i in ids if type(i) is not int or not 0 <= i < rows]  # type: a JSON true is a bool, 1.0 a float
    if bad:
        raise ConfigError(f"{where}: 'unseen_ids' holds {bad[0]!r}, not a row id in [0, {rows})")
    return ids
