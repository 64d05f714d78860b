"""Tokenised text as a re-iterable stream of id arrays, for training static embeddings over piece ids.

Two sources:

* ``ShardCorpus``: a split of a prepared corpus (``manifest.json:train``), read with ``tarfile`` + ``numpy``
  following docs/shard_format.md (``xpt_ds`` is never imported). One array per document, sentences already
  concatenated, so context windows cross sentence boundaries inside a document, as in MLM training. Each pass
  re-reads the shards: nothing is held in memory.
* ``TextCorpus``: raw UTF-8 text files tokenised with a SentencePiece model or a Hugging Face tokenizer; one
  array per non-empty line. Tokenised once, on the first pass, and kept in memory (for large corpora prepare
  shards instead).
"""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Iterator

import numpy as np

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import HfTokenizer, SpmTokenizer, batched, same_hf_tokenizer, sha256_file


class ShardCorpus:
    def __init__(self, spec: str):
        self.manifest_path, self.split = parse_split_spec(spec)
        try:
            manifest = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PrepareError(f"manifest not found: {self.manifest_path}") from None
        except ValueError as e:
            raise PrepareError(f"{self.manifest_path}: not a JSON manifest ({e})") from None
        if manifest.get("format_version") != 1:
            raise PrepareError(f"{self.manifest_path}: unsupported format_version {manifest.get('format_version')!r}")
        if self.split not in manifest.get("splits", {}):
            raise PrepareError(f"{self.manifest_path}: no split '{self.split}' "
                               f"(has: {', '.join(manifest.get('splits', {}))})")
        root = self.manifest_path.parent
        self.tokenizer = manifest_tokenizer(self.manifest_path, manifest)
        self.vocab_size = int(manifest["vocab_size"])
        if self.vocab_size != self.tokenizer.vocab_size:
            raise PrepareError(f"{self.manifest_path}: vocab_size {self.vocab_size} but {self.tokenizer.path} "
                               f"has {self.tokenizer.vocab_size} pieces")
        self.shards = [root / name for name in manifest["splits"][self.split]["shards"]]
        for shard in self.shards:
            if not shard.is_file():
                raise PrepareError(f"shard not found: {shard} (listed in {self.manifest_path})")
        digests = manifest["splits"][self.split].get("shard_sha256")  # manifests since 2026-11-28
        self.sha256 = dict(zip(self.shards, digests)) if isinstance(digests, list) else {}
        self.info = {"kind": "shards", "manifest": str(self.manifest_path.resolve()), "split": self.split,
                     "manifest_sha256": sha256_file(self.manifest_path), "shards": [s.name for s in self.shards]}

    def arrays(self) -> Iterator[np.ndarray]:
        for shard in self.shards:
            self._check_digest(shard)
            try:
                with tarfile.open(shard, "r:") as tar:
                    for member in tar:
                        if member.isfile() and member.name.endswith(".ids.npy"):
                            yield self._load(shard, member.name, tar.extractfile(member).read())
            except tarfile.TarError as e:
                raise PrepareError(f"{shard}: unreadable shard ({e})") from None

    def _check_digest(self, shard: Path) -> None:
        """A shard's bytes are the ones the manifest records (as the trainer checks them: docs/shard_format.md),
        on the first pass; later passes read the file checked."""
        expected = self.sha256.pop(shard, None)
        if expected and sha256_file(shard) != expected:
            raise PrepareError(f"{shard}: its sha256 is not the {str(expected)[:12]}… {self.manifest_path} records: "
                               "its bytes changed after it was prepared; prepare the corpus again")

    def _load(self, shard: Path, name: str, data: bytes) -> np.ndarray:
        try:
            ids = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, EOFError) as e:  # EOFError: an empty member
            raise PrepareError(f"{shard}: member {name} is not a .npy array ({e})") from None
        if ids.ndim != 1 or ids.dtype.kind != "u" or (ids.size and int(ids.max()) >= self.vocab_size):
            raise PrepareError(f"{shard}: member {name} is not a 1-D array of ids below {self.vocab_size}")
        return ids.astype(np.int64)


def manifest_tokenizer(path: Path, manifest: dict) -> SpmTokenizer | HfTokenizer:
    """The tokenizer the manifest at ``path`` records, checked as the trainer checks it (docs/shard_format.md):
    the SentencePiece model beside it by its file's sha256, or a Hugging Face tokenizer (``prepare
    --hf-tokenizer``) by the sha256 of its serialised backend."""
    kind = manifest.get("tokenizer_kind", "sentencepiece")  # manifests before --hf-tokenizer have no kind
    if kind == "huggingface":
        tok = HfTokenizer(manifest["tokenizer"])
        if not same_hf_tokenizer(manifest, tok.content_sha256(), tok.text_sha256()):
            raise PrepareError(f"{tok.path} is not the Hugging Face tokenizer {path} records (its content sha256 "
                               "differs)")
        return tok
    if kind != "sentencepiece":
        raise PrepareError(f"{path}: unknown tokenizer_kind {kind!r} (sentencepiece or huggingface)")
    tok = SpmTokenizer(path.parent / manifest["tokenizer"])
    if sha256_file(tok.path) != manifest.get("tokenizer_sha256"):
        raise PrepareError(f"{tok.path} does not match the sha256 in {path}")
    return tok


class TextCorpus:
    def __init__(self, files: list[Path], tokenizer: SpmTokenizer | HfTokenizer):
        self.files = [Path(f) for f in files]
        for f in self.files:
            if not f.is_file():
                raise PrepareError(f"text file not found: {f}")
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.vocab_size
        self._ids: list[np.ndarray] | None = None
        self.info = {"kind": "text", "files": [{"path": str(f.resolve()), "sha256": sha256_file(f)}
                                               for f in self.files]}

    def arrays(self) -> Iterator[np.ndarray]:
        if self._ids is None:
            self._ids = [ids for f in self.files for batch in batched(_lines(f)) for ids in
                         self.tokenizer.encode(batch) if len(ids)]
        return iter(self._ids)


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        try:
            for line in f:
                if line.strip():
                    yield line.rstrip("\n")
        except UnicodeDecodeError as e:
            raise PrepareError(f"{path}: invalid UTF-8 at byte {e.start} of a line") from None


def parse_split_spec(spec: str) -> tuple[Path, str]:
    """``DIR``, ``DIR/manifest.json`` or either with ``:SPLIT`` (default ``train``)."""
    path, _, split = str(spec).rpartition(":") if ":" in str(spec) else (str(spec), "", "train")
    path = Path(path)
    return (path / "manifest.json" if path.is_dir() else path), split or "train"


def count_ids(corpus: ShardCorpus | TextCorpus) -> tuple[np.ndarray, int]:
    """Occurrences of every id (int64 [vocab_size]) and the number of sequences, in one pass."""
    counts = np.zeros(corpus.vocab_size, dtype=np.int64)
    n = 0
    for ids in corpus.arrays():
        if ids.size and int(ids.max()) >= corpus.vocab_size:
            raise PrepareError(f"token id {int(ids.max())} is outside the vocabulary of {corpus.vocab_size}")
        counts += np.bincount(ids, minlength=corpus.vocab_size)
        n += 1
    return counts, n
