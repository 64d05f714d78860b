"""Embedding matrices on disk: ``NAME.npy`` (float32 [vocab_size, dim], row i = token id i) plus the sidecar
``NAME.json``, the contract with the trainer (which reads them with numpy and checks ``npy_sha256``; it needs
neither gensim nor torch for it).

Sidecar keys (format ``xpt-static-embeddings``, ``format_version`` 1), each written on one line:
``kind`` (``static``, ``input-embeddings``, ``procrustes``, ``adversarial``), ``npy`` (file name, next to the
sidecar), ``npy_sha256``, ``shape``, ``dtype``, ``vocab_size``, ``dim``, ``tokenizer`` (kind, path, sha256 of
the tokenizer whose ids index the rows), ``unseen_ids`` (rows that carry no trained vector: they are all zeros)
and, by kind, ``counts`` (per-id occurrences in the training text), ``options``, ``library``, ``corpus``,
``inputs``, ``map``, ``diagnostics``. Extra arrays (e.g. the linear map) are ``NAME.EXTRA.npy``, listed under
``files`` with their sha256.

Writes are atomic: every array goes to a temporary name, is fsynced and renamed, and the sidecar is written
last, so a sidecar names only complete arrays and a crash leaves no half-written ``NAME.npy``. The output
depends only on the inputs: no timestamps or timings are recorded.
"""
from __future__ import annotations

import hashlib
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import sha256_file
from data_tools.pipeline.shards import whole_file

FORMAT = "xpt-static-embeddings"
FORMAT_VERSION = 1


def output_prefix(out: Path | str) -> Path:
    """``--out`` names the prefix; ``NAME.npy`` or ``NAME.json`` are accepted for it too."""
    out = Path(out)
    return out.with_suffix("") if out.suffix in (".npy", ".json") else out


def writable_prefix(out: Path | str) -> Path:
    """``output_prefix(out)``, its folder made and a file of its own written and removed there: a ``--out`` that
    cannot be written is one line naming it before the work (a fastText training, a model load), not a temp file's
    name after it."""
    prefix = output_prefix(out)
    try:
        prefix.parent.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=prefix.parent, prefix=f".{prefix.name}.", suffix=".probe")
        probe.close()  # which removes it
    except OSError as e:
        file = next((p for p in (prefix.parent, *prefix.parent.parents) if p.exists() and not p.is_dir()), None)
        why = f"{file} is a file, not a folder" if file is not None else e.strerror or str(e)
        raise PrepareError(f"--out {out}: cannot write there ({why})") from None
    return prefix


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with whole_file(path) as f:
        f.write(data)


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def sidecar_text(meta: dict) -> str:
    """One top-level key per line, each value compact: readable, and the per-id lists stay one line each."""
    body = ",\n".join(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False, sort_keys=True)}"
                      for k, v in meta.items())
    return "{\n" + body + "\n}\n"


def write_embeddings(prefix: Path, matrix: np.ndarray, meta: dict,
                     extra: dict[str, np.ndarray] | None = None) -> Path:
    """Write ``PREFIX.npy`` (+ ``PREFIX.NAME.npy`` for each extra array) and then ``PREFIX.json``; returns the
    sidecar path. ``meta`` supplies kind, tokenizer, unseen_ids and the kind's own keys."""
    prefix = output_prefix(prefix)
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"embedding matrix must be 2-D, got shape {matrix.shape}")
    files = {}
    for name, array in (extra or {}).items():
        data = _npy_bytes(np.asarray(array, dtype=np.float32))
        path = prefix.with_name(f"{prefix.name}.{name}.npy")
        atomic_write_bytes(path, data)
        files[name] = {"path": path.name, "sha256": _sha(data)}
    data = _npy_bytes(matrix)
    npy = prefix.with_name(prefix.name + ".npy")
    atomic_write_bytes(npy, data)
    meta = dict(meta)
    head = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": meta.pop("kind"), "npy": npy.name,
            "npy_sha256": _sha(data), "shape": list(matrix.shape), "dtype": "float32",
            "vocab_size": matrix.shape[0], "dim": matrix.shape[1]}
    sidecar = prefix.with_name(prefix.name + ".json")
    meta = {**head, **meta, **({"files": files} if files else {})}
    atomic_write_bytes(sidecar, sidecar_text(meta).encode())
    return sidecar


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Embeddings:
    """A matrix read back, with its sidecar (``{}`` for a bare .npy)."""
    path: Path
    matrix: np.ndarray
    meta: dict
    sha256: str

    @property
    def seen(self) -> np.ndarray:
        """Rows with a trained vector: the sidecar's complement of ``unseen_ids``, else the non-zero rows."""
        if "unseen_ids" in self.meta:
            mask = np.ones(len(self.matrix), dtype=bool)
            mask[np.asarray(self.meta["unseen_ids"], dtype=np.int64)] = False
            return mask
        return np.abs(self.matrix).sum(1) > 0

    @property
    def counts(self) -> np.ndarray | None:
        return np.asarray(self.meta["counts"], dtype=np.int64) if "counts" in self.meta else None

    def describe(self) -> dict:
        return {"path": str(self.path.resolve()), "sha256": self.sha256, "kind": self.meta.get("kind", "npy"),
                "shape": list(self.matrix.shape)}


def read_embeddings(path: Path | str) -> Embeddings:
    """``NAME.npy`` (with ``NAME.json`` if present, then checked against it) or ``NAME.json``."""
    path = Path(path)
    npy = path.with_suffix(".npy") if path.suffix == ".json" else path
    if not npy.is_file():
        raise PrepareError(f"embedding file not found: {npy}")
    sidecar = npy.with_suffix(".json")
    sha = sha256_file(npy)
    meta = {}
    if sidecar.is_file():
        try:
            meta = json.loads(sidecar.read_text(encoding="utf-8"))
        except ValueError as e:
            raise PrepareError(f"{sidecar}: not JSON ({e})") from None
        if meta.get("format") != FORMAT:
            meta = {}  # some other JSON that happens to sit next to the array: treat the .npy as bare
        elif meta.get("npy_sha256") != sha:
            raise PrepareError(f"{npy} does not match its sidecar {sidecar.name} (sha256 differs)")
    try:
        matrix = np.load(npy, allow_pickle=False)
    except (ValueError, EOFError) as e:  # EOFError: an empty file
        raise PrepareError(f"{npy}: not a .npy array ({e})") from None
    if matrix.ndim != 2 or matrix.dtype.kind != "f":
        raise PrepareError(f"{npy}: expected a 2-D float matrix [vocab, dim], got {matrix.dtype} {matrix.shape}")
    return Embeddings(npy, matrix.astype(np.float32, copy=False), meta, sha)
