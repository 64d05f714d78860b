"""Start-up scan of a corpus: xpt_ds's shard index vs tarfile + np.lib.format vs webdataset's reader.

Every rank scans every shard before the first step (``xpt_ds.data.shards.scan_shards``): each document's offset
and length, the largest id, and a search for special ids. Three ways to do it on the same shards, page cache warm:
- xpt_ds: ``scan_shards`` as the trainer calls it (tar and npy headers parsed by ``xpt_ds.data.tar_index``);
- tarfile: the same scan with that reader switched off (``tarfile`` members, ``np.lib.format`` headers), what
  xpt_ds did before;
- webdataset: ``wds.WebDataset(paths).decode()`` over every sample, each array's length and maximum, what a
  pipeline built on webdataset's reader does to count a corpus.

    python benchmarks/bench_shard_scan.py [--docs 200000] [--shards 10] [--repeats 2]
"""
from __future__ import annotations

import argparse
import os
import platform
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

from data_tools.pipeline.shards import add_document, doc_key
from xpt_ds.data import shards as shards_module


def make_corpus(out: Path, docs: int, n_shards: int, vocab: int = 8000, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    paths = []
    for s in range(n_shards):
        path = out / f"train-{s:06d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:  # as data_tools writes a shard
            for d in range(docs // n_shards):
                ids = rng.integers(5, vocab, int(rng.integers(50, 2000)), dtype=np.uint16)
                add_document(tar, doc_key("train", s, s * (docs // n_shards) + d), ids)
        paths.append(str(path))
    return paths


def scan_xpt(paths):
    indexes, _ = shards_module.scan_shards(paths, "fail", vocab=(8000, "bench"), forbidden=(0, 1, 2, 3))
    return sum(len(i.lengths) for i in indexes), sum(i.tokens for i in indexes)


def scan_tarfile(paths):
    saved, shards_module.read_index = shards_module.read_index, lambda path, size: None
    try:
        return scan_xpt(paths)
    finally:
        shards_module.read_index = saved


def scan_webdataset(paths):
    import webdataset as wds
    docs = tokens = 0
    for sample in wds.WebDataset(paths, shardshuffle=False).decode():
        ids = sample["ids.npy"]
        docs, tokens = docs + 1, tokens + len(ids)
        if len(ids):
            int(ids.max())
    return docs, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--shards", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_corpus(Path(tmp), args.docs, args.shards)
        size = sum(os.path.getsize(p) for p in paths)
        ways = {"xpt_ds scan_shards": scan_xpt, "tarfile + np.lib.format": scan_tarfile,
                "webdataset reader": scan_webdataset}
        counts, best = {}, {}
        for name, scan in ways.items():
            counts[name] = scan(paths)  # warm-up: page cache, imports
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                scan(paths)
                times.append(time.perf_counter() - t0)
            best[name] = min(times)
        assert len(set(counts.values())) == 1, counts  # every way saw the same documents and tokens
    docs, tokens = counts["xpt_ds scan_shards"]
    print(f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {np.__version__}")
    print(f"{docs:,} documents, {tokens:,} tokens in {args.shards} shards, {size / 2**20:,.0f} MiB; best of "
          f"{args.repeats}")
    print("| scan | seconds | µs per document | time vs xpt_ds |")
    print("|---|---:|---:|---:|")
    for name, t in best.items():
        print(f"| {name} | {t:.2f} | {t / docs * 1e6:.1f} | {t / best['xpt_ds scan_shards']:.1f}x |")


if __name__ == "__main__":
    main()
