"""Shard scans recorded in the run directory: a resume reads them instead of scanning again, and the ranks of a
node share the first start's scans.

Before training, every rank indexes every shard it reads (``xpt_ds.data.shards.scan_shard``, and
``xpt_ds.data.parallel.scan_pair_shard`` for TreLM's pairs): the tar and npy headers, the largest id, a search for
special ids and the file's sha256. That reads every byte at about 6-7 CPU seconds a GiB (docs/shard_format.md), on
every rank and at every start: at 100B tokens, a quarter of an hour a rank before each resume of a job that
preemption restarts many times. So a run keeps each good scan's result, its document offsets and lengths and
largest ids, in ``RUN_DIR/scans/`` (one ``.npz`` of plain arrays a shard, read with ``allow_pickle=False``), under
a name that digests everything the result depends on:
- the file's identity: its absolute path, device, inode, size, and modification and change times (``st_ctime``
  changes with any write and cannot be set back by a user, so a shard rewritten, replaced, copied over or restored
  with its old mtime is another file);
- the scan's inputs: the counts and sha256 its manifest records, the vocabulary sizes and special ids checked;
- ``RECORDS``, the form of the record and of the checks behind it.

A later start that finds the same name uses the record, so a resume's scan costs a ``stat`` and a small read a
shard; anything else (another file, another tokenizer, another manifest record, a record that does not read
back whole) scans again. A corrupt shard is never recorded: every start names it again. What a record cannot see
is a byte that changes on the disk without a write (media decay) after the start that recorded it.

At a start where records are missing, the ranks of each node share the scanning, without waiting for each other:
local rank r first scans (and records) every ``LOCAL_WORLD_SIZE``-th shard from the r-th, then goes through the
others from the last back, reading the records the other ranks wrote meanwhile and scanning what is not recorded
yet itself. A node's first start then scans most shards once, not once a rank, and no rank waits for a slow one.
The shares go by node because nodes may hold their own copies of a corpus (other devices and inodes, so other
names); on a shared file system each node scans it once. ``data.reuse_scans: false`` turns all of this off: every
rank scans every shard at every start.

Once every rank's scans are done, rank 0 removes the records that no node used at that start (``prune``, through
``xpt_ds.training.streams.prune_scans``): a corpus copied anew to node-local disk at every start would otherwise
add a full set of records each time.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TypeVar

import numpy as np

log = logging.getLogger(__name__)

T = TypeVar("T")

RECORDS = 1  # the form of a record and of the checks behind it: raise when scan_shard/scan_pair_shard check more

SUBDIR = "scans"


@dataclasses.dataclass(frozen=True)
class Records:
    """Where this process keeps its scans (``directory``), and its share of a start's scanning: ``share`` = (r, n)
    scans the paths r, r + n, ... of each list first."""
    directory: Path
    share: tuple[int, int] = (0, 1)
    counts: dict[str, int] = dataclasses.field(default_factory=lambda: {"read": 0, "scanned": 0}, compare=False)
    used: set[str] = dataclasses.field(default_factory=set, compare=False)  # the record files this start read or wrote

    def summary(self) -> str:
        """What this process's scans came from, for the start's log."""
        return (f"shard scans: {self.counts['read']} read from {self.directory}, {self.counts['scanned']} scanned "
                "(data.reuse_scans)")


_ACTIVE: ContextVar[Records | None] = ContextVar("xpt_ds_scan_records", default=None)


@contextlib.contextmanager
def kept(records: Records | None) -> Iterator[None]:
    """Scans inside this block (``shards.scan_each``) go through ``records`` (None: scanned, not recorded)."""
    token = _ACTIVE.set(records)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active() -> Records | None:
    """The records of the innermost ``kept`` block, or None."""
    return _ACTIVE.get()


def node_share() -> tuple[int, int]:
    """(local rank, ranks on this node) as the launchers say: torchrun's ``LOCAL_WORLD_SIZE``, the ``deepspeed``
    launcher's ``LOCAL_SIZE``, Slurm's ``SLURM_NTASKS_PER_NODE``; (0, 1) where none says."""
    def number(*names: str) -> int | None:
        for name in names:
            with contextlib.suppress(KeyError, ValueError):
                return int(os.environ[name].split("(")[0])
        return None
    rank, size = number("LOCAL_RANK", "SLURM_LOCALID"), number("LOCAL_WORLD_SIZE", "LOCAL_SIZE",
                                                              "SLURM_NTASKS_PER_NODE")
    if rank is None or size is None or not 0 <= rank < size:
        return 0, 1
    return rank, size


STALE_TEMP_S = 3600.0  # a record's temporary file this old was left by a process killed while writing it


def run_records(run_dir: Path, reuse: bool) -> Records | None:
    """The records of the run in ``run_dir`` (``data.reuse_scans``), this rank's share of the node's. Temporary
    files that processes killed mid-write left there (``save``) go once they are an hour old: younger ones may
    be another rank's, being written now."""
    if not reuse:
        return None
    directory = Path(run_dir) / SUBDIR
    with contextlib.suppress(OSError):
        for tmp in directory.glob(".*.npz.*"):
            with contextlib.suppress(OSError):
                if time.time() - tmp.stat().st_mtime > STALE_TEMP_S:
                    tmp.unlink()
    return Records(directory, node_share())


def prune(directory: Path, keep: set[str]) -> int:
    """Remove the records in ``directory`` that are not in ``keep`` (the names every node's start used): those of
    files that changed or went (a corpus copied anew to node-local disk at each start, a ``chmod -R``, a new
    manifest or tokenizer), which no later start can match. Called once every rank's scans are done. Returns how
    many went."""
    gone = 0
    with contextlib.suppress(OSError):
        for file in directory.glob("*.npz"):
            if file.name not in keep:
                with contextlib.suppress(OSError):
                    file.unlink()
                    gone += 1
    return gone


def identity(path: str) -> tuple | None:
    """(absolute path, device, inode, size, mtime, ctime) of ``path``; None when it cannot be read (the scan then
    names the problem)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def work_order(paths: list[str], share: tuple[int, int]) -> list[str]:
    """This rank's share of ``paths`` first, then the others from the last back: each other rank goes forward
    through its own share, so a rank that finished early meets it from its far end and scans little twice."""
    r, n = share
    mine = paths[r::n]
    taken = set(mine)
    return mine + [p for p in reversed(paths) if p not in taken]


def scan_all(records: Records, paths: list[str], scan: Callable[[str], T], inputs: Callable[[str], tuple],
             rebuild: Callable[[str, list[tuple]], T], fatal: Callable[[Exception], bool] = lambda e: True
             ) -> dict[str, T | Exception]:
    """Path -> the scan's result, from its record where one matches (``rebuild`` of the path and its indexes'
    (offsets, lengths, dtype, largest id)), else scanned and recorded; or the ValueError/OSError of a scan that
    failed (a corrupt shard: never recorded). In ``work_order``. Once a scan fails with an error that will stop the
    start (``fatal``: not a shard that ``on_corrupt_shard: skip`` skips), the paths after it in ``paths``' order
    are left out: only an earlier one can be the one named."""
    out: dict[str, T | Exception] = {}
    warned = unreadable = False
    position = {path: i for i, path in enumerate(paths)}
    stop = len(paths)  # the first path (in paths' order) known to stop the start
    for path in work_order(paths, records.share):
        if position[path] > stop:
            continue
        ident = identity(path)
        of = None if ident is None else record_of(ident, inputs(path))
        file = None if of is None else record_file(records.directory, of)
        try:
            found = None if file is None else load(file, of)
        except Exception as e:  # noqa: BLE001 - a torn or foreign file is a missing record: the shard is scanned again
            found = None
            if not unreadable:
                log.info("scan record %s unreadable (%s): scanning again", file, e)
                unreadable = True
        if found is not None:
            out[path] = rebuild(path, found)
            records.counts["read"] += 1
            records.used.add(file.name)
            continue
        records.counts["scanned"] += 1
        try:
            out[path] = result = scan(path)
        except (ValueError, OSError) as e:
            out[path] = e
            if fatal(e):
                stop = min(stop, position[path])
            continue
        if file is None or identity(path) != ident:  # changed while it was scanned: the next start scans it again
            continue
        try:
            records.directory.mkdir(parents=True, exist_ok=True)
            save(file, of, result)
            records.used.add(file.name)
        except OSError as e:
            if not warned:
                log.warning("cannot record shard scans in %s (%s): a later start scans them again",
                            records.directory, e.strerror or e)
                warned = True
    return out


def record_of(ident: tuple, inputs: tuple) -> str:
    """What a record is of: the form, the file's identity and the scan's inputs. Its file is named by a digest of
    this and holds it too, so a record is used only for exactly what it was made of (not for a file renamed)."""
    return repr((RECORDS, ident, inputs))


def record_file(directory: Path, of: str) -> Path:
    return directory / f"{hashlib.blake2b(of.encode(), digest_size=16).hexdigest()}.npz"


def flatten(result) -> list:
    """The ShardIndex values of a scan's result: itself, or each field of a dataclass of them (``PairShard``)."""
    if hasattr(result, "offsets"):
        return [result]
    return [getattr(result, f.name) for f in dataclasses.fields(result)]


def save(file: Path, of: str, result) -> None:
    """``result``'s indexes to ``file``, with what they are ``of`` (``record_of``), whole or not at all (a
    temporary file renamed over it)."""
    indexes = flatten(result)
    arrays = {}
    for i, ix in enumerate(indexes):
        arrays[f"offsets{i}"], arrays[f"lengths{i}"] = ix.offsets, ix.lengths
    meta = {"of": of, "dtypes": [ix.dtype.str for ix in indexes],
            "max_ids": [int(ix.max_id) for ix in indexes]}
    arrays["meta"] = np.array(json.dumps(meta))
    tmp = file.with_name(f".{file.name}.{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, file)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def load(file: Path, of: str) -> list[tuple] | None:
    """(offsets, lengths, dtype, largest id) of each index ``save`` wrote to ``file`` for exactly ``of``, or None
    if there is no such record. Raises when the file does not read back whole and consistent."""
    try:
        npz = np.load(file, allow_pickle=False)
    except FileNotFoundError:
        return None
    with npz:
        meta = json.loads(str(npz["meta"]))
        if meta["of"] != of:
            return None
        out = []
        for i, (dtype, max_id) in enumerate(zip(meta["dtypes"], meta["max_ids"], strict=True)):
            offsets, lengths = npz[f"offsets{i}"], npz[f"lengths{i}"]
            if (offsets.dtype != np.int64 or lengths.dtype != np.int64 or offsets.ndim != 1
                    or offsets.shape != lengths.shape):
                raise ValueError("arrays of another type or shape")
            out.append((offsets, lengths, np.dtype(dtype), int(max_id)))
        return out
