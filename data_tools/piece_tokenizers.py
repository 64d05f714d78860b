"""The two kinds of tokenizer whose ids index embedding rows: a SentencePiece model (the target language's,
from ``prepare``) and a Hugging Face tokenizer (the source model's). Both encode text to id arrays, look up
pieces, and describe themselves (``identity``: kind, path, sha256) for the sidecar files, so a reader can check
that a matrix's rows belong to the tokenizer it uses.

Pieces as a TSV field (``escape_piece``): ``dictionary.tsv`` (``xpt-data parallel`` writes it, ``align-embeddings``
reads it) holds token strings, and a token may hold a tab, a newline or a backslash (BERT's ``\\``).
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Iterable

import numpy as np

from data_tools.errors import PrepareError

# The files that define a Hugging Face tokenizer; the identity hashes whichever of them the directory holds.
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                      "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
                      "tokenizer.model")
# What a tokenizer's text sha256 leaves out of its serialised backend (docs/shard_format.md; the trainer's
# xpt_ds.data.tokenizer.TEXT_SHA256_LESS is the same).
TEXT_SHA256_LESS = ("post_processor", "padding", "truncation")


def same_hf_tokenizer(manifest: dict, content_sha256: str, text_sha256: str) -> bool:
    """Whether the Hugging Face tokenizer a manifest records is the one of these sha256s: the same serialised
    backend, or the same text sha256 (``HfTokenizer.text_sha256``; manifests written before 2026-12-04 lack it)."""
    recorded = manifest.get("tokenizer_text_sha256")
    return manifest.get("tokenizer_content_sha256") == content_sha256 or (recorded is not None
                                                                           and recorded == text_sha256)


_UNESCAPE = {"\\": "\\", "t": "\t", "n": "\n"}
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)


def escape_piece(piece: str) -> str:
    """A piece as one TSV field: backslash, tab and newline escaped."""
    return piece.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def unescape_piece(field: str) -> str:
    """A field ``escape_piece`` wrote, back to the piece; another backslash stays as it is."""
    return _ESCAPED.sub(lambda m: _UNESCAPE.get(m.group(1), m.group(0)), field)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class SpmTokenizer:
    def __init__(self, path: Path | str):
        import sentencepiece as spm
        self.path = Path(path)
        if not self.path.is_file():
            raise PrepareError(f"SentencePiece model not found: {self.path}")
        try:
            self.sp = spm.SentencePieceProcessor(model_file=str(self.path))
        except (RuntimeError, OSError) as e:
            raise PrepareError(f"{self.path}: not a SentencePiece model ({str(e).strip().splitlines()[-1]})") from None
        self.vocab_size = self.sp.get_piece_size()

    def identity(self) -> dict:
        return {"kind": "sentencepiece", "path": str(self.path.resolve()), "sha256": sha256_file(self.path),
                "vocab_size": self.vocab_size}

    def encode(self, lines: list[str]) -> list[np.ndarray]:
        return [np.asarray(ids, dtype=np.int64) for ids in self.sp.encode(lines)]

    def piece_to_id(self, piece: str) -> int | None:
        i = self.sp.piece_to_id(piece)
        return i if self.sp.id_to_piece(i) == piece else None  # unknown pieces map to unk_id

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(int(i))


def check_vocabulary(tok, path) -> None:
    """transformers 5 builds a tokenizer of its special tokens only, without an error, for a directory that holds
    no tokenizer files: every word would be written to the shards as unknown."""
    if len(tok) <= len(set(tok.all_special_ids)):
        raise PrepareError(f"{path}: no tokenizer files there (its tokenizer would know only its {len(tok)} "
                           "special tokens)")


class HfTokenizer:
    def __init__(self, name_or_dir: Path | str):
        self.name = str(name_or_dir)
        self.path = _local_dir(self.name)
        if not any((self.path / name).is_file() for name in HF_TOKENIZER_FILES):  # a model's weights alone
            raise PrepareError(f"{self.path} holds no tokenizer files (no Hugging Face tokenizer: none of "
                               f"{', '.join(HF_TOKENIZER_FILES)})")
        import transformers
        transformers.logging.set_verbosity_error()  # "sequence longer than model_max_length": we never run the model
        try:
            self.tok = transformers.AutoTokenizer.from_pretrained(str(self.path), trust_remote_code=False)
        except (OSError, ValueError) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise PrepareError(f"{self.path}: cannot load a Hugging Face tokenizer ({reason})") from None
        check_vocabulary(self.tok, self.path)
        self.vocab = self.tok.get_vocab()
        self.vocab_size = len(self.tok)  # includes added tokens, as the model's embedding matrix does

    def identity(self) -> dict:
        files = {p.name: sha256_file(p) for p in sorted(self.path.iterdir()) if p.name in HF_TOKENIZER_FILES}
        combined = hashlib.sha256("".join(f"{n}:{s}\n" for n, s in files.items()).encode()).hexdigest()
        return {"kind": "hf", "path": str(self.path.resolve()), "name": self.name, "sha256": combined,
                "files": files, "vocab_size": self.vocab_size}

    def content_sha256(self) -> str:
        """sha256 of the serialised backend (``tokenizer.json`` as the ``tokenizers`` library writes it): what a
        manifest records and the trainer compares, as it survives ``save_pretrained``."""
        return hashlib.sha256(self.tok.backend_tokenizer.to_str().encode()).hexdigest()

    def text_sha256(self) -> str:
        """sha256 of what turns text into ids, the serialised backend less ``TEXT_SHA256_LESS``: the special tokens
        a post-processor puts around a text (the shards hold none of them; a decoder's export makes its tokenizer
        put bos first), padding and truncation (docs/shard_format.md)."""
        spec = json.loads(self.tok.backend_tokenizer.to_str())
        spec.update(dict.fromkeys(TEXT_SHA256_LESS))
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()

    def encode(self, lines: list[str]) -> list[np.ndarray]:
        ids = self.tok(lines, add_special_tokens=False)["input_ids"]
        return [np.asarray(x, dtype=np.int64) for x in ids]

    def piece_to_id(self, piece: str) -> int | None:
        return self.vocab.get(piece)

    def id_to_piece(self, i: int) -> str:
        return self.tok.convert_ids_to_tokens(int(i))


def _local_dir(name_or_dir: str) -> Path:
    """A local directory as is; otherwise a hub id, resolved to the cached snapshot of its tokenizer files."""
    path = Path(name_or_dir)
    if path.is_dir():
        return path
    if path.is_file() and path.suffix == ".gguf":  # was "directory not found", for a file that is there
        raise PrepareError(f"{name_or_dir} is a .gguf file, not a Hugging Face tokenizer directory or hub id: write "
                           "it to a directory first (python -m experiments.decoder.source GGUF DIR, in the "
                           "repository) and give that directory")
    if path.exists() or name_or_dir.startswith((".", "/")) or name_or_dir.count("/") > 1:
        raise PrepareError(f"Hugging Face tokenizer directory not found: {name_or_dir}")
    from huggingface_hub import snapshot_download
    try:
        return Path(snapshot_download(name_or_dir, allow_patterns=list(HF_TOKENIZER_FILES)))
    except Exception as e:  # the hub client raises many types (offline, 404, auth); all mean "not available"
        raise PrepareError(f"Hugging Face tokenizer '{name_or_dir}' not found locally or on the hub "
                           f"({type(e).__name__})") from None


def load_tokenizer(identity: dict) -> SpmTokenizer | HfTokenizer:
    """The tokenizer a sidecar names, checked against its recorded sha256."""
    kind, path = identity.get("kind"), identity.get("path")
    tok = SpmTokenizer(path) if kind == "sentencepiece" else HfTokenizer(path) if kind == "hf" else None
    if tok is None:
        raise PrepareError(f"unknown tokenizer kind {kind!r} in a sidecar")
    if tok.identity()["sha256"] != identity.get("sha256"):
        raise PrepareError(f"tokenizer {path} changed since the embeddings were written (sha256 differs)")
    return tok


def open_tokenizer(path: Path | str) -> SpmTokenizer | HfTokenizer:
    """A SentencePiece model file or a Hugging Face tokenizer directory/id, by what ``path`` is."""
    return SpmTokenizer(path) if Path(path).is_file() else HfTokenizer(path)


def batched(lines: Iterable[str], size: int = 1000) -> Iterable[list[str]]:
    batch: list[str] = []
    for line in lines:
        batch.append(line)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
