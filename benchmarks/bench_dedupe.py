"""Memory and time of the clean stage's corpus-wide dedupe, and the CPU time of its main process: this checkout's
``prepare clean`` with dedupe, without it (``--no-dedupe``), and optionally another checkout's (``--code DIR``, a
``git worktree add DIR COMMIT``: the before figures) on the same corpus; prints a markdown table.

    python benchmarks/bench_dedupe.py [--sentences 20000000] [--workers 2] [--work DIR] [--code DIR]

The corpus is synthetic and seeded: documents of 20 sentences of 4-9 words drawn from 50,000 made-up Cyrillic
words, one sentence in 20 repeated within its document. Each way is ``data_tools.cli.prepare clean`` in a process of
its own, which reports its own peak resident set (the main process holds the digests; the workers do not) and the
CPU seconds of its main process and of its workers. The main process takes the cleaned chunks one at a time, so
its CPU seconds bound the stage's wall time at any number of workers. Bytes a sentence are the peak above
``--no-dedupe``'s, over the sentences kept. The corpora of the ways with dedupe are compared byte for byte.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN = """import resource, sys
from data_tools.cli.prepare import main
code = main(sys.argv[1:])
me, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print("peak_kib", me.ru_maxrss, me.ru_utime + me.ru_stime, workers.ru_utime + workers.ru_stime)
sys.exit(code)
"""


def write_corpus(path: Path, sentences: int) -> None:
    rng = random.Random(0)
    letters = "абвгдежзийклмнопрстуфхцчшщьюяіїє"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(50_000)]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(0, sentences, 20):
            doc = []
            for _ in range(20):
                doc.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))).capitalize() + ".")
                if rng.random() < 0.05:
                    doc.append(doc[0])
            f.write(" ".join(doc) + "\n\n")


def run_way(corpus: Path, out: Path, code: Path, extra: list[str], workers: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)  # an earlier run's output would be up to date: the stage would skip
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUN, "clean", "--input", str(corpus), "--out", str(out),
                           "--workers", str(workers), "--quiet", *extra],
                          capture_output=True, text=True, cwd=code)  # the checkout's data_tools comes first
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"error: prepare clean failed: {proc.stderr.strip().splitlines()[-1:]}")
    peak, main_cpu, workers_cpu = proc.stdout.split("peak_kib")[-1].split()
    stats = json.loads((out / ".prepare" / "clean.json").read_text())["stats"]
    sha = hashlib.sha256()
    with open(out / "sentences" / "corpus.jsonl", "rb") as f:  # in pieces: a child forked after a whole read
        while piece := f.read(1 << 24):  # would start with this process's peak as its own
            sha.update(piece)
    digest = sha.hexdigest()
    return {"seconds": seconds, "peak": int(peak) * 1024, "main_cpu": float(main_cpu),
            "workers_cpu": float(workers_cpu), "sentences": stats["sentences"], "sha256": digest}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=20_000_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--work", type=Path, default=None, help="where the corpus and outputs go (default: a temp dir)")
    p.add_argument("--code", type=Path, default=None, help="another checkout to run the same way, 'before'")
    args = p.parse_args(argv)
    work = (args.work or Path(tempfile.mkdtemp(prefix="bench_dedupe_"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"corpus_{args.sentences}.txt"
    if not corpus.is_file():
        write_corpus(corpus, args.sentences)
    ways = {"dedupe": (REPO, []), "no dedupe": (REPO, ["--no-dedupe"])}
    if args.code is not None:
        ways["before (--code)"] = (args.code.resolve(), [])
    rows = {way: run_way(corpus, work / way.split(" (")[0].replace(" ", "_"), code, extra, args.workers)
            for way, (code, extra) in ways.items()}
    if any(r["sha256"] != rows["dedupe"]["sha256"] for way, r in rows.items() if way != "no dedupe"):
        raise SystemExit("error: the corpus --code wrote differs from this checkout's")
    flat = rows["no dedupe"]["peak"]
    same = "; corpus.jsonl of both checkouts: the same" if args.code is not None else ""
    print(f"{platform.machine()}, {platform.python_version()}, {args.workers} workers, "
          f"{corpus.stat().st_size / 1e9:.2f} GB corpus{same}\n")
    print("| way | sentences kept | wall s | main process CPU s | workers CPU s | peak RSS MB | "
          "bytes a sentence above no dedupe |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for way, r in rows.items():
        per = "" if way == "no dedupe" else f"{(r['peak'] - flat) / r['sentences']:.1f}"
        print(f"| {way} | {r['sentences']:,} | {r['seconds']:.1f} | {r['main_cpu']:.1f} | {r['workers_cpu']:.1f} | "
              f"{r['peak'] / 1e6:,.0f} | {per} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
