"""Random access to WebDataset token-id shards (docs/shard_format.md) through a per-shard document index.

The index (byte offset and token count of every document) is read from the tar and .npy headers only,
so every rank can lay out the whole epoch's token stream without decoding it, then read just the
documents it needs. A shard that is truncated or holds a bad member fails the scan, naming the shard. The scan
also reads every document's ids once (a sequential read of the shard, vectorised) for the largest id, so that a
shard made with another tokenizer fails the scan, or is skipped, before training starts instead of mid-run.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import resource
import tarfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

import numpy as np

from xpt_ds.data import scan_records
from xpt_ds.data.tar_index import read_index
from xpt_ds.errors import UserError
from xpt_ds.io.digest import sha256_file

T = TypeVar("T")

log = logging.getLogger(__name__)

_BLOCK = 512


class DataError(UserError, ValueError):
    """Unusable training data (corrupt shard, ids outside the vocabulary); the message names the shard."""


@dataclass(frozen=True)
class ShardIndex:
    path: str
    offsets: np.ndarray  # int64 [n_docs]: byte offset of each document's array data
    lengths: np.ndarray  # int64 [n_docs]: tokens per document
    dtype: np.dtype
    max_id: int = -1  # the largest id of any document (-1: no tokens); scan_shard reads it

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())


def layout(*indexes: ShardIndex) -> tuple[int, int, str]:
    """(documents, tokens, a digest of the document offsets, lengths and largest id) of one shard, read through
    ``indexes`` (a parallel shard: its four): what every rank's scan of that shard must agree on, as the data
    layout, hence every rank's position in it, follows from it."""
    h = hashlib.blake2b(digest_size=8)
    for idx in indexes:
        for array in (idx.offsets, idx.lengths):
            h.update(np.ascontiguousarray(array, np.int64))  # no copy: the scan made them int64
        h.update(str(idx.max_id).encode())
    return len(indexes[0].lengths), sum(idx.tokens for idx in indexes), h.hexdigest()


def _documents(path: str, offsets: np.ndarray, lengths: np.ndarray, dtype: np.dtype):
    """The non-empty documents' data for one vectorised pass: (memory-mapped shard, reduceat bounds, indexes of
    the non-empty documents), or (None, None, indexes) where the data is not on element boundaries of the file
    (then read document by document). npy data starts 64-byte aligned inside 512-byte tar blocks, so every
    document's first element sits on an element boundary of the whole file."""
    full = np.flatnonzero(lengths > 0)
    size = dtype.itemsize
    if not len(full) or (offsets % size).any():
        return None, None, full
    data = np.memmap(path, dtype=dtype, mode="r", shape=(Path(path).stat().st_size // size,))
    starts = offsets[full] // size
    bounds = np.stack([starts, starts + lengths[full]], 1).reshape(-1)  # [start0, end0, start1, ...]
    if bounds[-1] >= len(data):  # reduceat takes indices < len; a scanned shard ends with its end-of-archive marker
        raise ValueError(f"document data runs to byte {bounds[-1] * size}, the end of the file")
    return data, bounds, full


def _each_document(path: str, offsets: np.ndarray, lengths: np.ndarray, dtype: np.dtype, docs: np.ndarray):
    with open(path, "rb") as fh:
        for i in docs:
            fh.seek(int(offsets[i]))
            yield int(i), np.frombuffer(fh.read(int(lengths[i]) * dtype.itemsize), dtype)


def document_extrema(path: str, offsets: np.ndarray, lengths: np.ndarray, dtype: np.dtype, minima: bool = True
                     ) -> tuple[np.ndarray, np.ndarray]:
    """int64 [n_docs] (min, max) of every document's array; (0, -1) for an empty one; ``minima=False`` skips the
    second pass and returns zeros for the minima. A ``reduceat`` over the memory-mapped shard."""
    lo, hi = np.zeros(len(lengths), np.int64), np.full(len(lengths), -1, np.int64)
    data, bounds, full = _documents(path, offsets, lengths, dtype)
    if data is None:
        for i, ids in _each_document(path, offsets, lengths, dtype, full):
            lo[i], hi[i] = ids.min(), ids.max()
        return lo, hi
    hi[full] = np.maximum.reduceat(data, bounds)[::2]
    if minima:
        lo[full] = np.minimum.reduceat(data, bounds)[::2]
    del data
    return lo, hi


def _any_of(data: np.ndarray, ids: tuple[int, ...]) -> np.ndarray:
    hit = data == ids[0]  # a few comparisons beat np.isin when the ids span a wide range (XLM-R's mask is 250001)
    for i in ids[1:]:
        hit |= data == i
    return hit


def first_special(path: str, offsets: np.ndarray, lengths: np.ndarray, dtype: np.dtype, ids: tuple[int, ...],
                  kind: str = "shard") -> tuple[int, int] | None:
    """(document, id) of the first document that holds one of ``ids``, or None: one vectorised pass, as
    ``document_extrema``'s; a file that cannot be read so is DataError 'corrupt KIND PATH'."""
    if not ids:
        return None
    try:
        return _first_special(path, offsets, lengths, dtype, ids)
    except (OSError, ValueError) as e:
        raise DataError(f"corrupt {kind} {path}: {e}") from None


def _first_special(path: str, offsets: np.ndarray, lengths: np.ndarray, dtype: np.dtype, ids: tuple[int, ...]
                   ) -> tuple[int, int] | None:
    data, bounds, full = _documents(path, offsets, lengths, dtype)
    if data is None:
        for i, doc in _each_document(path, offsets, lengths, dtype, full):
            hit = _any_of(doc, ids)
            if hit.any():
                return i, int(doc[hit.argmax()])
        return None
    hits = np.logical_or.reduceat(_any_of(data, ids), bounds)[::2]  # per document: holds a special id
    if not hits.any():
        return None
    i = int(full[hits.argmax()])
    start = int(offsets[i]) // dtype.itemsize
    doc = np.asarray(data[start:start + int(lengths[i])])
    return i, int(doc[_any_of(doc, ids).argmax()])


def npy_header(raw: bytes, name: str, allowed: tuple = (np.uint16, np.uint32)) -> tuple[np.dtype, tuple, int]:
    """(dtype, shape, header bytes) of a 1-D ``.npy`` member whose dtype is one of ``allowed``."""
    f = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
    except Exception as e:  # numpy parses a damaged header with ast and tokenize: ValueError, SyntaxError,
        # tokenize.TokenError, ...; their text can hold an object's address
        raise ValueError(f"{name} has no readable .npy header ({type(e).__name__})") from None
    if len(shape) != 1 or dtype not in allowed or fortran:
        raise ValueError(f"{name} has dtype {dtype} shape {shape}, expected 1-D "
                         f"{'/'.join(np.dtype(a).name for a in allowed)}")
    return np.dtype(dtype), shape, f.tell()


def read_member_header(fh, member: tarfile.TarInfo, size: int, allowed: tuple = (np.uint16, np.uint32)
                       ) -> tuple[np.dtype, int, int]:
    """(dtype, length, byte offset of the data) of one ``.npy`` tar member; ValueError if it is cut or malformed."""
    if member.offset_data + member.size > size:
        raise ValueError(f"{member.name} is truncated")
    fh.seek(member.offset_data)
    dtype, shape, header = npy_header(fh.read(min(member.size, 4096)), member.name, allowed)
    if header + shape[0] * dtype.itemsize != member.size:
        raise ValueError(f"{member.name}: {shape[0]} x {dtype} does not fill its {member.size} bytes")
    return dtype, shape[0], member.offset_data + header


def check_archive_end(fh, tar: tarfile.TarFile, size: int) -> None:
    """After iterating ``tar``: tarfile takes an EOF at a header boundary for the end of the archive, so require
    the real end-of-archive marker (two zero blocks) and at most a record's padding after it: a shard cut short
    or zero-filled is never read silently."""
    fh.seek(tar.offset)
    if fh.read(2 * _BLOCK) != bytes(2 * _BLOCK):
        raise ValueError("truncated: no end-of-archive marker")
    trailing = size - tar.offset - 2 * _BLOCK
    if trailing >= tarfile.RECORDSIZE:
        raise ValueError(f"{trailing} bytes follow the end-of-archive marker at byte {tar.offset}: the "
                         "rest of the shard is zero-filled or unreadable")


def out_of_vocab_cause(in_manifest: bool) -> str:
    """Why a shard holds an id outside the run's vocabulary. A shard its manifest lists was made with the run's
    tokenizer (``expand_shards`` checked the manifest's vocab size and sha256), so its bytes changed since."""
    if in_manifest:
        return ("its manifest records this tokenizer, so the shard's bytes changed after it was written "
                "(corrupt or replaced)")
    return "it was made with another tokenizer, or is corrupt"


def scan_shard(path: str, expected: tuple | None = None, vocab: tuple[int, str] | None = None,
               forbidden: tuple[int, ...] = ()) -> ShardIndex:
    """Index one shard from its headers and its largest id; raises DataError naming the shard if it is corrupt or
    truncated, or, with ``vocab`` = (vocab size, tokenizer name), if it holds an id outside that vocabulary, or one
    of the special ids ``forbidden`` (pad, cls/bos, sep/eos, mask: shards hold text only, docs/shard_format.md;
    a mask id in the text would be a position the MLM loss never sees as text).

    A tar reader takes the first zero block for the end of the archive, so a shard whose tail was zero-filled
    (a torn copy, a file system that lost blocks) would read as a shorter, valid one. Two checks catch it:
    after the end-of-archive marker only the tar record's padding may follow (tar pads to whole records of
    ``tarfile.RECORDSIZE`` bytes), and ``expected`` (documents, tokens), the counts the manifest records for
    this shard, must match what was indexed. ``expected``'s third item, the shard's sha256 (manifests since
    2026-11-28), when given, must be the file's: a byte changed inside the token data is found too."""
    offsets, lengths, dtypes = [], [], set()
    try:
        size = Path(path).stat().st_size
        fast = read_index(path, size)  # None: a shard in a form only tarfile reads, or a corrupt one
        if fast is not None:
            offsets, lengths, dtypes = fast
        else:
            with open(path, "rb") as fh, tarfile.open(fileobj=fh, mode="r:") as tar:
                for member in tar:
                    if not member.isfile() or not member.name.endswith(".ids.npy"):
                        continue
                    dtype, length, offset = read_member_header(fh, member, size)
                    offsets.append(offset)
                    lengths.append(length)
                    dtypes.add(dtype)
                check_archive_end(fh, tar, size)
        if expected is not None and (len(lengths), int(sum(lengths))) != tuple(expected[:2]):
            raise ValueError(f"holds {len(lengths)} documents / {int(sum(lengths))} tokens, the manifest records "
                             f"{expected[0]} / {expected[1]} (zero-filled, cut or replaced)")
        if expected is not None and len(expected) > 2 and expected[2] and sha256_file(path) != expected[2]:
            raise ValueError(f"its sha256 is not the {str(expected[2])[:12]}… the manifest records: its bytes changed "
                             "after it was written (a flipped or overwritten byte, or another shard under its name)")
    except (tarfile.TarError, ValueError, EOFError, OSError) as e:
        raise DataError(f"corrupt shard {path}: {e}") from None
    if len(dtypes) > 1:
        raise DataError(f"corrupt shard {path}: mixed dtypes {sorted(map(str, dtypes))}")
    offsets, lengths = np.asarray(offsets, np.int64), np.asarray(lengths, np.int64)
    dtype = dtypes.pop() if dtypes else np.dtype(np.uint16)
    try:
        maxima = document_extrema(path, offsets, lengths, dtype, minima=False)[1]
    except (OSError, ValueError) as e:
        raise DataError(f"corrupt shard {path}: {e}") from None
    worst = int(maxima.argmax()) if len(maxima) else 0
    if vocab is not None and len(maxima) and maxima[worst] >= vocab[0]:
        raise DataError(f"shard {path} (document {worst}) holds token id {maxima[worst]} >= vocab size {vocab[0]} "
                        f"of {vocab[1]}: {out_of_vocab_cause(expected is not None)}")
    if forbidden:
        found = first_special(path, offsets, lengths, dtype, forbidden)
        if found is not None:
            raise DataError(f"shard {path} (document {found[0]}) holds special token id {found[1]}: shards hold text "
                            "only (no pad, cls/bos, sep/eos or mask ids; docs/shard_format.md); it was written by a tool "
                            "that kept them (xpt-data prepare before 2026-11-28 kept a \"[MASK]\" spelled in the text: "
                            "run it again, which rewrites its shards), or is corrupt")
    return ShardIndex(path, offsets, lengths, dtype, int(maxima.max()) if len(maxima) else -1)


def scan_shards(paths: list[str], on_corrupt: str, expected: dict[str, tuple] | None = None,
                vocab: tuple[int, str] | None = None, forbidden: tuple[int, ...] = ()
                ) -> tuple[list[ShardIndex], list[str]]:
    """Indexes of the readable shards, and the names of the skipped ones (``on_corrupt='skip'``).
    ``expected``: path -> (documents, tokens[, sha256]) from the manifest, for the shards it lists. ``vocab``:
    (vocab size, tokenizer name): a shard holding an id >= the vocab size is corrupt too, and so is one holding an id of
    ``forbidden`` (``TargetTokenizer.not_in_shards``)."""
    return scan_each(paths, on_corrupt, lambda path: scan_shard(path, (expected or {}).get(path), vocab, forbidden),
                     lambda path: ("tokens", (expected or {}).get(path), vocab, forbidden), lambda _, ix: ix[0])


def scan_each(paths: list[str], on_corrupt: str, scan: Callable[[str], T], inputs: Callable[[str], tuple] | None = None,
              rebuild: Callable[[str, list[ShardIndex]], T] | None = None) -> tuple[list[T], list[str]]:
    """``scan`` of every path, and the paths whose scan raised DataError: skipped with a warning under
    ``on_corrupt='skip'``, else the error stands (target shards here, parallel shards in ``data.parallel``).
    Inside ``scan_records.kept`` (a run's start), each path's result comes from the run's record of it where one
    matches ``inputs(path)`` (what the scan checks besides the file), ``rebuild`` making the result of the path and
    its indexes; the first corrupt shard in ``paths``' order is the one named, whatever order the scans ran in."""
    records = scan_records.active()
    found = {} if records is None or inputs is None else scan_records.scan_all(
        records, paths, scan, inputs, lambda path, parts: rebuild(path, [ShardIndex(path, *p) for p in parts]),
        fatal=lambda e: on_corrupt != "skip" or not isinstance(e, DataError))
    good, skipped = [], []
    for path in paths:
        try:
            result = found[path] if path in found else scan(path)
            if isinstance(result, Exception):
                raise result
            good.append(result)
        except DataError as e:
            if on_corrupt != "skip":
                raise
            log.warning("skipping %s", e)
            skipped.append(path)
    return good, skipped


MIN_OPEN = 8  # shard files a reader may keep open however low the open-file limit: a few shards' worth of reads
MAX_OPEN = 4096  # and at most, however high the limit
OTHER_FILES = 128  # descriptors left to the rest of a process (sockets, pipes, tensors a worker hands over, ...)
READERS_PER_PROCESS = 4  # readers one process may hold (a parallel stream: 4; a data.mix corpus: 1 each)


def open_file_cap() -> int:
    """Shard files one ``DocReader`` keeps open in this process: its share (1/``READERS_PER_PROCESS``) of the
    open-file soft limit (``ulimit -n``, RLIMIT_NOFILE) less ``OTHER_FILES``, within [``MIN_OPEN``, ``MAX_OPEN``].
    The limit is per process: each DataLoader worker and each rank on a node has its own, so none of them
    shares it with another. A soft limit of 1,024 gives 224 (a shuffle buffer over 203 small shards reads without
    reopening them: 0.24 CPU s for 3 epochs, where the former fixed 64 reopened files and took 0.37), 65,536 (what
    ``xpt-ds train`` raises it to where the hard limit allows) the maximum, 256 gives 32 and 64 the minimum."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    share = MAX_OPEN if soft == resource.RLIM_INFINITY else (soft - OTHER_FILES) // READERS_PER_PROCESS
    return min(MAX_OPEN, max(MIN_OPEN, share))


class DocReader:
    """Reads documents by (shard, doc), each shard's file opened lazily, per process. At most ``open_file_cap()``
    (read in the process that reads, at its first read: a DataLoader worker's own limit) stay open, the least
    recently read closed first: a stream reads a few shards at a time (an epoch goes shard by shard, through a
    shuffle buffer), and one file per shard ever read would put a corpus of thousands of shards past the usual
    limit of 1,024 open files in every DataLoader worker. A file opened again must be the one this process first
    read (device, inode, size, modification time): a shard replaced during the run is named, not read."""

    def __init__(self, indexes: list[ShardIndex]):
        self.indexes = indexes
        self._files: OrderedDict[int, BinaryIO] = OrderedDict()
        self._seen: dict[int, tuple[int, int, int, int]] = {}  # shard -> its file's identity when first opened
        self._pid = os.getpid()
        self._cap: int | None = None  # open_file_cap() of the process that reads, at its first read

    def read(self, shard: int, doc: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Tokens ``[start, stop)`` of one document (only those bytes are read)."""
        idx = self.indexes[shard]
        fh = self._file(shard)
        stop = int(idx.lengths[doc]) if stop is None else stop
        size = idx.dtype.itemsize
        fh.seek(int(idx.offsets[doc]) + start * size)
        raw = fh.read((stop - start) * size)
        if len(raw) != (stop - start) * size:
            raise DataError(f"corrupt shard {idx.path}: document {doc} is truncated")
        return np.frombuffer(raw, dtype=idx.dtype)

    def _file(self, shard: int) -> BinaryIO:
        if self._pid != os.getpid():  # a forked DataLoader worker: never share the parent's file offsets
            self._files, self._pid, self._cap = OrderedDict(), os.getpid(), None
        fh = self._files.get(shard)
        if fh is not None:
            self._files.move_to_end(shard)
            return fh
        path = self.indexes[shard].path
        fh = open(path, "rb")
        st = os.fstat(fh.fileno())
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if self._seen.setdefault(shard, identity) != identity:
            fh.close()
            raise DataError(f"shard {path} changed during the run (another file, size or modification time than "
                            "when this run first read it): it was replaced or rewritten; put the shard back, or "
                            "start a run on the new data")
        self._files[shard] = fh
        if self._cap is None:
            self._cap = open_file_cap()
        while len(self._files) > self._cap:
            self._files.popitem(last=False)[1].close()
        return fh

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()
        self._files.clear()
