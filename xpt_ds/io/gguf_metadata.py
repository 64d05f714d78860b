"""The scalar metadata of a ``.gguf`` file (``general.*``, ``llama.*``, ``tokenizer.ggml.*_token_id``), read from
its header alone.

``gguf.GGUFReader`` builds every field, the vocabulary's and merges' strings one numpy view each: 2.3 s for
SmolLM2-135M's 49,152 pieces, more for Llama 3's 128,256, and transformers reads the file that way again for the
config, the weights and the tokenizer. The special token ids need only the scalars; an array (the vocabulary, the
merges, the scores) is stepped over by its element sizes, its strings by their lengths. The format is GGUF
versions 2 and 3 (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), in either byte order, as
``GGUFReader`` detects it.
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path

from xpt_ds.errors import UserError

MAGIC = b"GGUF"
STRING, ARRAY = 8, 9
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class GGUFError(UserError, ValueError):
    """A file that is not GGUF, or whose header is cut short: one line naming it (a ``ValueError`` too, which
    the tokenizer loaders' callers already turn into their own one-line errors)."""


class _Cursor:
    def __init__(self, buf, order: str, path: Path):
        self.buf, self.order, self.path, self.at = buf, order, path, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.at + size > len(self.buf):
            raise GGUFError(f"{self.path}: the GGUF header ends early (byte {self.at} of {len(self.buf)})")
        value = struct.unpack_from(self.order + fmt, self.buf, self.at)[0]
        self.at += size
        return value

    def string(self) -> str:
        n = self.take("Q")
        if self.at + n > len(self.buf):
            raise GGUFError(f"{self.path}: the GGUF header ends early (a string of {n} bytes at byte {self.at})")
        raw = bytes(self.buf[self.at:self.at + n])
        self.at += n
        return raw.decode("utf-8", errors="replace")

    def skip_array(self) -> None:
        kind, count = self.take("I"), self.take("Q")
        if kind == STRING:
            for _ in range(count):
                n = self.take("Q")  # not ``self.at += self.take(...)``: that adds to the position before the read
                self.at += n
        elif kind in SCALARS:
            self.at += struct.calcsize(SCALARS[kind]) * count
        elif kind == ARRAY:
            for _ in range(count):
                self.skip_array()
        else:
            raise GGUFError(f"{self.path}: unknown GGUF value type {kind} in an array at byte {self.at}")


def gguf_scalars(path: Path) -> dict[str, int | float | bool | str]:
    """``{key: value}`` of every scalar and string key of ``path``'s metadata; array keys are left out. A file that
    is not GGUF, or whose header is cut short, raises ``GGUFError`` naming it."""
    path = Path(path)
    with open(path, "rb") as f:
        if f.read(4) != MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (no GGUF magic)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            version = struct.unpack_from("<I", buf, 4)[0]
            order = "<" if version & 0xFFFF else ">"  # a big-endian file's version reads as 0xNN000000
            cur = _Cursor(buf, order, path)
            cur.at = 4
            version = cur.take("I")
            if version not in (2, 3):
                raise GGUFError(f"{path}: GGUF version {version}, where 2 and 3 are read")
            cur.take("Q")  # tensors
            out: dict = {}
            for _ in range(cur.take("Q")):
                key, kind = cur.string(), cur.take("I")
                if kind == STRING:
                    out[key] = cur.string()
                elif kind == ARRAY:
                    cur.skip_array()
                elif kind in SCALARS:
                    out[key] = cur.take(SCALARS[kind])
                else:
                    raise GGUFError(f"{path}: unknown GGUF value type {kind} for {key!r}")
            return out
