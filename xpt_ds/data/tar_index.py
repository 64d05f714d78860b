"""The index of a shard's ``.ids.npy`` members, read from the tar and ``.npy`` headers without ``tarfile``.

``tarfile`` and ``np.lib.format`` cost about 30 µs per member (a ``literal_eval`` of every npy header), most of
the start-up scan of a corpus of short documents. Shards as ``data_tools``, ``np.save`` and webdataset's
``TarWriter`` write them (USTAR members, each with or without a pax header of its path, size or times; npy
version 1.0 headers in numpy's own layout) are read here instead. A shard with anything else (a GNU or global pax
header, another pax key, a bad checksum, a member cut short, an npy header in another form) gets ``None``, and the
caller reads it with ``tarfile``, which names what is wrong. So this reader accepts nothing the ``tarfile`` path
refuses: every header's checksum is verified (vectorised, after the walk) and the end-of-archive check is the
same.
"""
from __future__ import annotations

import mmap
import re
import sys
import tarfile

import numpy as np

_BLOCK = 512
_ZERO = bytes(_BLOCK)
_NPY_MAGIC = b"\x93NUMPY\x01\x00"  # version 1.0: a uint16 header length follows
_NPY_HEADER = re.compile(rb"\{'descr': '(<u2|<u4)', 'fortran_order': False, 'shape': \((\d+),\), \} *\n")
_DTYPES = {b"<u2": np.dtype(np.uint16), b"<u4": np.dtype(np.uint32)}
_CHUNK = 8192  # headers checksummed per numpy call


def read_index(path: str, size: int) -> tuple[list[int], list[int], set] | None:
    """(byte offset of each document's array data, its length, the dtypes seen) over the regular ``*.ids.npy``
    members in order, or None when the shard needs ``tarfile`` (see the module docstring). Other regular
    members and directories are skipped, as the ``tarfile`` path skips them."""
    if size < 2 * _BLOCK or size % _BLOCK or sys.byteorder != "little":
        return None
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if len(mm) != size:  # changed since its size was read
                return None
            found = _walk(mm, size)
            if found is None:
                return None
            headers, sums, offsets, lengths, dtypes = found
            if not _checksums_hold(mm, size, headers, sums):
                return None
    except (OSError, ValueError):  # the tarfile path reports it
        return None
    return offsets, lengths, dtypes


def _walk(mm: mmap.mmap, size: int):
    headers, sums, offsets, lengths, dtypes = [], [], [], [], set()
    pos, pax = 0, None
    while True:
        if pos + 2 * _BLOCK > size:
            return None  # no room for the end-of-archive marker
        header = mm[pos:pos + _BLOCK]
        if header == _ZERO:
            break
        kind = header[156:157]
        if kind not in (b"0", b"\0", b"5", b"x") or header[124] & 0x80:  # another member kind, or a base-256 size
            return None
        try:
            member_size = int(header[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
            stored = int(header[148:156].split(b"\0", 1)[0].strip() or b"0", 8)
        except ValueError:
            return None
        name = header[:100].split(b"\0", 1)[0]
        if pax is not None:  # a pax header's path and size stand for the member's own
            name, member_size = pax.get(b"path", name), int(pax.get(b"size", member_size))
        data = pos + _BLOCK
        if data + member_size > size or (kind == b"\0" and name.endswith(b"/")) or (kind == b"x" and pax is not None):
            return None
        headers.append(pos // _BLOCK)
        sums.append(stored)
        pax = None
        if kind == b"x":
            pax = _pax_records(mm[data:data + member_size])
            if pax is None:
                return None
        elif kind != b"5" and name.endswith(b".ids.npy"):
            npy = _npy(mm, data, member_size)
            if npy is None:
                return None
            dtypes.add(npy[0])
            offsets.append(npy[2])
            lengths.append(npy[1])
        pos = data + -(-member_size // _BLOCK) * _BLOCK
    trailing = size - pos - 2 * _BLOCK
    if pax is not None or mm[pos + _BLOCK:pos + 2 * _BLOCK] != _ZERO or trailing >= tarfile.RECORDSIZE:
        return None
    return headers, sums, offsets, lengths, dtypes


_PAX_KEYS = {b"path", b"size", b"mtime", b"atime", b"ctime", b"uid", b"gid", b"uname", b"gname"}


def _pax_records(raw: bytes) -> dict[bytes, bytes] | None:
    """A pax extended header's records (``LENGTH KEY=VALUE\\n``), as webdataset's TarWriter writes them (its float
    mtime makes one per member); None for a key that changes how the member reads (sparse files, a charset) or a
    malformed record."""
    records, pos = {}, 0
    while pos < len(raw) and raw[pos:pos + 1] != b"\0":
        space = raw.find(b" ", pos)
        try:
            length = int(raw[pos:space])
        except ValueError:
            return None
        record = raw[space + 1:pos + length]
        if space < 0 or length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            return None
        key, value = record[:-1].split(b"=", 1)
        if key not in _PAX_KEYS or key == b"size" and not value.isdigit():
            return None
        records[key] = value
        pos += length
    return records


def _npy(mm: mmap.mmap, data: int, member_size: int) -> tuple[np.dtype, int, int] | None:
    """(dtype, length, offset of the array data) of a version 1.0 npy header in numpy's layout, or None."""
    if member_size < 10 or mm[data:data + 8] != _NPY_MAGIC:
        return None
    header_len = int.from_bytes(mm[data + 8:data + 10], "little")
    m = _NPY_HEADER.fullmatch(mm[data + 10:data + 10 + header_len])
    if m is None:
        return None
    dtype, length = _DTYPES[m.group(1)], int(m.group(2))
    if 10 + header_len + length * dtype.itemsize != member_size:
        return None
    return dtype, length, data + 10 + header_len


def _checksums_hold(mm: mmap.mmap, size: int, headers: list[int], sums: list[int]) -> bool:
    """Every header's unsigned checksum as tar defines it: the sum of its bytes, the checksum field counted as
    eight spaces."""
    blocks = np.frombuffer(mm, np.uint8, count=size).reshape(-1, _BLOCK)
    try:
        at, stored = np.asarray(headers, np.int64), np.asarray(sums, np.int64)
        for i in range(0, len(at), _CHUNK):
            rows = blocks[at[i:i + _CHUNK]].astype(np.int64)
            got = rows.sum(1) - rows[:, 148:156].sum(1) + 8 * 32
            if not np.array_equal(got, stored[i:i + _CHUNK]):
                return False
        return True
    finally:
        del blocks  # the mmap cannot close while an array views it
