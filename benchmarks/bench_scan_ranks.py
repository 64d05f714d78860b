"""The start-up shard scan on one node: one rank against N ranks scanning the same shards at once.

Every rank scans every shard it reads before the first step (``xpt_ds.data.shards.scan_shards``): the tar and npy
headers, the largest id, a search for special ids and, for shards whose manifest records one, the file's sha256.
Timed here, each in 1 process and in N processes started together (the ranks of one node), on the same shards
(written as data_tools writes them, ``bench_shard_scan.make_corpus``):
- ``scan + sha256``: ``scan_shards`` with the manifest's counts and sha256s, what the trainer does;
- ``scan``: the same without the sha256s (what a rank does when it does not verify a shard's digest);
- ``sha256``: ``sha256_file`` of every shard alone;
- ``scan + sha256 of 1/N``: ``scan`` of every shard and the sha256 of every N-th one, from the process's own
  offset: a rank's work when the N ranks of a node share the hashing.
- ``records: first start``: ``scan + sha256`` with ``data.reuse_scans`` (``xpt_ds.data.scan_records``) and no
  records yet: the N processes share the scanning and record each shard;
- ``records: resume``: the same once every record is there (it must follow ``records: first start``).
The passes take turns within each repeat (a busy machine's changing load falls on all alike), with the shards in
the page cache (after a warm-up pass) and/or evicted from it before each pass (``posix_fadvise(DONTNEED)``, no
root needed), so that the first reader reads the disk (``--cache``). Each line gives every
repeat's wall time (the slowest of the N processes), the CPU seconds of each process (their mean), the bytes all
the processes read from the disk (``read_bytes`` of ``/proc/self/io``: page-cache hits are not counted) and the
page-cache residency before the pass.

    python benchmarks/bench_scan_ranks.py [--docs 1100000] [--shards 24] [--ranks 8] [--repeats 2] [--dir DIR]
        [--work 'scan + sha256' scan sha256 'scan + sha256 of 1/N'] [--cache warm|cold|both]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench_shard_scan import make_corpus
from xpt_ds.data.scan_records import Records, kept
from xpt_ds.data.shards import scan_shards
from xpt_ds.io.digest import sha256_file

VOCAB, FORBIDDEN = (8000, "bench"), (0, 1, 2, 3)


def scan_with_sha(paths: list[str], expected: dict) -> None:
    scan_shards(paths, "fail", expected, VOCAB, FORBIDDEN)


def scan_only(paths: list[str], expected: dict) -> None:
    scan_shards(paths, "fail", {p: e[:2] for p, e in expected.items()}, VOCAB, FORBIDDEN)


def sha_only(paths: list[str], expected: dict) -> None:
    for p in paths:
        assert sha256_file(p) == expected[p][2]


def scan_sha_slice(paths: list[str], expected: dict, rank: int = 0, ranks: int = 1) -> None:
    mine = set(paths[rank::ranks])
    scan_shards(paths, "fail", {p: e if p in mine else e[:2] for p, e in expected.items()}, VOCAB, FORBIDDEN)


RECORDS = Path(tempfile.gettempdir()) / f"bench_scan_records_{os.getpid()}"  # set by main (--dir's sibling)


def records_first(paths: list[str], expected: dict, rank: int = 0, ranks: int = 1) -> None:
    """A run's first start with ``data.reuse_scans``: no records yet; the N processes share the scanning."""
    with kept(Records(RECORDS, (rank, ranks))):
        scan_shards(paths, "fail", expected, VOCAB, FORBIDDEN)


def records_resume(paths: list[str], expected: dict, rank: int = 0, ranks: int = 1) -> None:
    """A resume: every shard's record is there (the previous pass wrote them)."""
    records = Records(RECORDS, (rank, ranks))
    with kept(records):
        scan_shards(paths, "fail", expected, VOCAB, FORBIDDEN)
    assert records.counts["scanned"] == 0, records.counts


def disk_read_bytes() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("read_bytes:")).split()[1])


def _rank(work, paths, expected, rank, ranks, barrier, out) -> None:
    barrier.wait()
    t0, c0, r0 = time.perf_counter(), time.process_time(), disk_read_bytes()
    if work in (scan_sha_slice, records_first, records_resume):
        work(paths, expected, rank, ranks)
    else:
        work(paths, expected)
    out.put((time.perf_counter() - t0, time.process_time() - c0, disk_read_bytes() - r0))


def run_ranks(work, paths: list[str], expected: dict, ranks: int) -> tuple[float, float, int]:
    """(wall seconds until the last of ``ranks`` processes, started together, has run ``work``; their mean CPU
    seconds; the bytes they read from the disk)."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(ranks), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(work, paths, expected, r, ranks, barrier, out)) for r in range(ranks)]
    for p in procs:
        p.start()
    times = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    return max(t[0] for t in times), sum(t[1] for t in times) / ranks, sum(t[2] for t in times)


def evict(paths: list[str]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident(paths: list[str]) -> float:
    """Fraction of the shards' bytes in the page cache (util-linux ``fincore``), or -1 without it."""
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES,SIZE", *paths],
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return -1.0
    res, size = map(int, out[0::2]), map(int, out[1::2])
    return sum(res) / max(1, sum(size))


WORK = {"scan + sha256": scan_with_sha, "scan": scan_only, "sha256": sha_only, "scan + sha256 of 1/N": scan_sha_slice,
        "records: first start": records_first, "records: resume": records_resume}


def table(paths: list[str], expected: dict, ranks: int, repeats: int, cold: bool, work: list[str]) -> None:
    """Every (work, processes) pass once per repeat, in turn, so that a change in the machine's load falls on all
    of them alike."""
    passes = [(name, n) for name in work for n in ((ranks,) if name.endswith("1/N") else (1, ranks))]
    results: dict[tuple[str, int], list[tuple]] = {key: [] for key in passes}
    if not cold:
        scan_with_sha(paths, expected)  # warm-up: page cache, imports
    for _ in range(repeats):
        for name, n in passes:
            if name == "records: first start":
                shutil.rmtree(RECORDS, ignore_errors=True)
            if cold:
                evict(paths)
            cached = resident(paths)
            results[name, n].append((*run_ranks(WORK[name], paths, expected, n), cached))
    print(f"\npage cache {'evicted before each pass' if cold else 'warm'}\n")
    print("| work | processes | wall seconds, each repeat | CPU seconds per process | GiB read from disk | "
          "cached before |")
    print("|---|---:|---|---|---|---|")
    for (name, n), runs in results.items():
        wall, cpu, read, cached = zip(*runs)
        print(f"| {name.replace('/N', f'/{ranks}')} | {n} | {' / '.join(f'{t:.1f}' for t in wall)} | "
              f"{' / '.join(f'{c:.1f}' for c in cpu)} | {' / '.join(f'{r / 2**30:.2f}' for r in read)} | "
              f"{' / '.join(f'{c:.0%}' for c in cached)} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1_100_000)
    ap.add_argument("--shards", type=int, default=24)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", nargs="+", choices=tuple(WORK), default=list(WORK))
    ap.add_argument("--cache", choices=("warm", "cold", "both"), default="both")
    ap.add_argument("--dir", type=Path, help="the shards: written there and kept, or read from there when a run "
                                             "with the same --docs and --shards left them (default: a temporary "
                                             "folder, deleted after)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        where = args.dir or Path(tmp)
        paths = [str(where / f"train-{s:06d}.tar") for s in range(args.shards)]
        if not all(map(os.path.exists, paths)):
            where.mkdir(parents=True, exist_ok=True)
            paths = make_corpus(where, args.docs, args.shards)
        indexes, _ = scan_shards(paths, "fail", vocab=VOCAB)
        expected = {i.path: (len(i.lengths), i.tokens, sha256_file(i.path)) for i in indexes}
        size = sum(os.path.getsize(p) for p in paths)
        print(f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}; {args.docs:,} "
              f"documents in {args.shards} shards, {size / 2**30:.2f} GiB (ready in {time.perf_counter() - t0:.0f}"
              " s)")
        try:
            for cold in {"warm": (False,), "cold": (True,), "both": (False, True)}[args.cache]:
                table(paths, expected, args.ranks, args.repeats, cold, args.work)
        finally:
            shutil.rmtree(RECORDS, ignore_errors=True)


if __name__ == "__main__":
    main()
