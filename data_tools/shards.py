"""Write WebDataset tar shards of per-document token-id arrays plus manifest.json (docs/shard_format.md)."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np

FORMAT_VERSION = 1


def id_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 65536 else np.uint32


class ShardWriter:
    """Rolls over to a new ``{split}-{index:06d}.tar`` once a shard holds ``max_tokens`` tokens."""

    def __init__(self, out_dir: Path, split: str, vocab_size: int, max_tokens: int = 50_000_000):
        self.out_dir, self.split, self.dtype, self.max_tokens = out_dir, split, id_dtype(vocab_size), max_tokens
        self.shards: list[str] = []
        self.docs = self.tokens = self.sentences = 0
        self._tar = None
        self._shard_tokens = 0

    def _roll(self) -> None:
        self.close()
        name = f"{self.split}-{len(self.shards):06d}.tar"
        self.shards.append(name)
        self._tar = tarfile.open(self.out_dir / name, "w", format=tarfile.USTAR_FORMAT)
        self._shard_tokens = 0

    def write(self, sentences: list[list[int]]) -> None:
        """One document = its sentences' ids concatenated."""
        if self._tar is None or self._shard_tokens >= self.max_tokens:
            self._roll()
        ids = np.fromiter((t for s in sentences for t in s), dtype=self.dtype)
        buf = io.BytesIO()
        np.save(buf, ids, allow_pickle=False)
        info = tarfile.TarInfo(f"{self.split}-{len(self.shards) - 1:06d}-{self.docs:08d}.ids.npy")
        info.size = buf.tell()
        buf.seek(0)
        self._tar.addfile(info, buf)
        self.docs += 1
        self.sentences += len(sentences)
        self.tokens += len(ids)
        self._shard_tokens += len(ids)

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()
            self._tar = None

    def summary(self) -> dict:
        return {"shards": self.shards, "documents": self.docs, "sentences": self.sentences, "tokens": self.tokens}


def write_manifest(out_dir: Path, tokenizer: Path, vocab_size: int, splits: dict[str, dict]) -> Path:
    manifest = {"format_version": FORMAT_VERSION, "vocab_size": vocab_size, "tokenizer": tokenizer.name,
                "tokenizer_sha256": hashlib.sha256(tokenizer.read_bytes()).hexdigest(), "splits": splits}
    path = out_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2))
    return path
