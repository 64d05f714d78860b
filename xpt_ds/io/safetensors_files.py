"""Safetensors files written tensor by tensor, and read one tensor at a time.

The writer streams: it lays out every file's header from the tensors' names, dtypes and shapes before any value
exists, then writes each value as it comes, so an export of an 8B model never holds more than one tensor (stock
``save_pretrained`` and ``safetensors.torch.save_file`` first turn a whole file's tensors into bytes). Files are
cut at ``max_shard_bytes`` and named as transformers names them (``model.safetensors``, or
``model-0000k-of-0000n.safetensors`` with ``model.safetensors.index.json``), so stock ``from_pretrained`` loads a
directory of them. The format (https://huggingface.co/docs/safetensors): 8 bytes little-endian header length, the
JSON header (padded with spaces to a multiple of 8), then the tensors' bytes, C order, little-endian.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
          torch.bool: "BOOL"}
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9  # transformers' own size for hub checkpoints ("5GB")


def _nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()


def plan_shards(specs: list[tuple[str, tuple[int, ...], torch.dtype]],
                max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> list[list[int]]:
    """Indices of ``specs`` per file, in order: a file takes tensors until the next would pass ``max_shard_bytes``
    (a tensor larger than that gets a file of its own)."""
    shards: list[list[int]] = [[]]  # one file even for no tensors
    size = 0
    for i, (_, shape, dtype) in enumerate(specs):
        n = _nbytes(shape, dtype)
        if shards[-1] and size + n > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(i)
        size += n
    return shards


class ShardedWriter:
    """Write the tensors ``specs`` names (name, shape, dtype), in that order, into ``out`` as (sharded) safetensors.

    ``write(name, value)`` takes each value in turn (cast to the spec's dtype; its shape must match); ``close()``
    checks that every one came and writes the index of a sharded set. Files are written under a temporary name
    and renamed when complete, so a stopped export leaves no file that reads as whole."""

    def __init__(self, out: Path, specs: list[tuple[str, tuple[int, ...], torch.dtype]],
                 max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, metadata: dict[str, str] | None = None,
                 name: str = "model"):
        self.out = Path(out)
        self.index = f"{name}.safetensors.index.json"
        self.specs = [(n, tuple(int(d) for d in s), dt) for n, s, dt in specs]
        self.metadata = {"format": "pt", **(metadata or {})}
        self.shards = plan_shards(self.specs, max_shard_bytes)
        n = len(self.shards)
        self.files = [f"{name}.safetensors"] if n == 1 else [f"{name}-{k + 1:05d}-of-{n:05d}.safetensors"
                                                             for k in range(n)]
        self.file_of = {self.specs[i][0]: k for k, idx in enumerate(self.shards) for i in idx}
        self.next = 0  # index into specs of the next value expected
        self.handle = None
        self.shard = -1

    def _open(self, k: int) -> None:
        header: dict = {"__metadata__": self.metadata}
        offset = 0
        for i in self.shards[k]:
            name, shape, dtype = self.specs[i]
            n = _nbytes(shape, dtype)
            header[name] = {"dtype": DTYPES[dtype], "shape": list(shape), "data_offsets": [offset, offset + n]}
            offset += n
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        self.handle = open(self.out / (self.files[k] + ".tmp"), "wb")
        self.handle.write(len(text).to_bytes(8, "little"))
        self.handle.write(text)
        self.shard = k

    def _finish_file(self) -> None:
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        self.handle = None
        os.replace(self.out / (self.files[self.shard] + ".tmp"), self.out / self.files[self.shard])

    def write(self, name: str, value: torch.Tensor) -> None:
        if self.next >= len(self.specs) or self.specs[self.next][0] != name:
            want = self.specs[self.next][0] if self.next < len(self.specs) else "nothing more"
            raise ValueError(f"safetensors writer: got {name}, expected {want}")
        _, shape, dtype = self.specs[self.next]
        if tuple(value.shape) != shape:
            raise ValueError(f"safetensors writer: {name} has shape {tuple(value.shape)}, planned {shape}")
        k = self.file_of[name]
        if k != self.shard:
            if self.handle is not None:
                self._finish_file()
            self._open(k)
        data = value.detach().to("cpu", dtype).contiguous().reshape(-1)
        self.handle.write(data.view(torch.uint8).numpy().data if data.numel() else b"")
        self.next += 1

    def close(self) -> list[str]:
        """Finish the last file and write the index (sharded only); returns the files written."""
        if self.next != len(self.specs):
            raise ValueError(f"safetensors writer: {len(self.specs) - self.next} tensor(s) not written, first "
                             f"{self.specs[self.next][0]}")
        if self.handle is not None:
            self._finish_file()
        for k, f in enumerate(self.files):  # a file of no tensors at all (nothing frozen) is still written
            if not (self.out / f).exists():
                self._open(k)
                self._finish_file()
        written = list(self.files)
        if len(self.files) > 1:
            total = sum(_nbytes(s, dt) for _, s, dt in self.specs)
            index = {"metadata": {"total_size": total},
                     "weight_map": {name: self.files[self.file_of[name]] for name, _, _ in self.specs}}
            (self.out / self.index).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
            written.append(self.index)
        return written

    def abort(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
