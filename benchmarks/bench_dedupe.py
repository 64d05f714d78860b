"""Memory and time of the clean stage's corpus-wide dedupe: ``SeenSentences`` (a set of the newest digests, sorted
arrays for the rest) against a plain Python set of the digests (what it replaced), and against ``--no-dedupe``;
prints a markdown table.

    python benchmarks/bench_dedupe.py [--sentences 20000000] [--workers 2] [--work DIR]

The corpus is synthetic and seeded: documents of 20 sentences of 4-9 words drawn from 50,000 made-up Cyrillic
words, one sentence in 20 repeated within its document. Each way is ``python -m data_tools.cli.prepare clean`` in
a process of its own, which reports its own peak resident set (the main process holds the digests; the workers
do not). "set" is the same code with the set never spilled (``seen.RECENT`` above the sentence count). Bytes a
sentence are the peak above ``--no-dedupe``'s, over the sentences kept. The corpora of "arrays" and "set" are
compared byte for byte.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN = """import resource, sys
from data_tools.pipeline.clean import seen
seen.RECENT = {recent}
from data_tools.cli.prepare import main
code = main(sys.argv[1:])
print("peak_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
sys.exit(code)
"""
WAYS = {"arrays": ("seen.RECENT", []), "set": (str(1 << 62), []), "no dedupe": ("seen.RECENT", ["--no-dedupe"])}


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


def run_way(corpus: Path, out: Path, recent: str, extra: list[str], workers: int) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUN.format(recent=recent), "clean", "--input", str(corpus),
                           "--out", str(out), "--workers", str(workers), "--quiet", *extra],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"error: prepare clean failed: {proc.stderr.strip().splitlines()[-1:]}")
    peak = int(proc.stdout.split("peak_kib")[-1]) * 1024
    stats = json.loads((out / ".prepare" / "clean.json").read_text())["stats"]
    sha = hashlib.sha256()
    with open(out / "sentences" / "corpus.jsonl", "rb") as f:  # in pieces: a child forked after a whole read
        while piece := f.read(1 << 24):  # would start with this process's peak as its own
            sha.update(piece)
    digest = sha.hexdigest()
    return {"seconds": seconds, "peak": peak, "sentences": stats["sentences"], "sha256": digest}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=20_000_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--work", type=Path, default=None, help="where the corpus and outputs go (default: a temp dir)")
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_dedupe_"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"corpus_{args.sentences}.txt"
    if not corpus.is_file():
        write_corpus(corpus, args.sentences)
    rows = {way: run_way(corpus, work / way.replace(" ", "_"), recent, extra, args.workers)
            for way, (recent, extra) in WAYS.items()}
    if rows["arrays"]["sha256"] != rows["set"]["sha256"]:
        raise SystemExit("error: the arrays' corpus differs from the set's")
    flat = rows["no dedupe"]["peak"]
    print(f"{platform.machine()}, {platform.python_version()}, {args.workers} workers, "
          f"{corpus.stat().st_size / 1e9:.2f} GB corpus; corpus.jsonl of arrays == set: yes\n")
    print("| way | sentences kept | wall s | peak RSS MB | bytes a sentence above no dedupe |")
    print("|---|---:|---:|---:|---:|")
    for way, r in rows.items():
        per = "" if way == "no dedupe" else f"{(r['peak'] - flat) / r['sentences']:.1f}"
        print(f"| {way} | {r['sentences']:,} | {r['seconds']:.1f} | {r['peak'] / 1e6:,.0f} | {per} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
