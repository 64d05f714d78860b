"""Throughput of ``data_tools.cli.prepare`` with 1 and 2 (or more) workers; prints a markdown table.

    python benchmarks/bench_prepare.py [--corpora konlpy uagec] [--workers 1 2] [--repeats 3] [--work DIR]

Corpora: ``konlpy`` is the demo's Korean text (konlpy's kolaw/*.txt + kobill/*.txt, one document per file,
vocab 2000, BERT layout, as launch/demo.sh); ``uagec`` is UA-GEC's corrected Ukrainian text (written by
``data_tools.cli.uagec``; needs ``pip install --no-deps ua-gec==2.1.3``), vocab 8000; ``uagec_x10`` is that text
ten times over with dedupe off and SentencePiece on a 50k-sentence sample, a corpus big enough for worker
start-up (about 0.2 s per stage with the spawn start method) not to dominate. Each run is the whole
pipeline into a fresh directory; shards are cut small (``--shard-docs``) so that there are more shards than
workers. "sentences" are the sentences written to the shards (after dedupe and filters), all splits; the
tokenize rate is over the tokenize stage's wall time (planning, worker start-up and writing included), the
pipeline rate over all four stages. Times are the median of ``--repeats`` runs. The shards of every worker
count are compared byte for byte with the first's.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import sentencepiece

from data_tools.pipeline.log import set_quiet
from data_tools.pipeline.run import run_pipeline


def konlpy_inputs() -> list[Path]:
    spec = importlib.util.find_spec("konlpy")
    if spec is None:
        raise SystemExit("error: konlpy is not installed")
    root = Path(list(spec.submodule_search_locations)[0]) / "data" / "corpus"
    return sorted((root / "kolaw").glob("*.txt")) + sorted((root / "kobill").glob("*.txt"))


def uagec_inputs(work: Path) -> list[Path]:
    from data_tools.corpora.uagec import export
    export(work / "uagec_text", labels=False)
    return [work / "uagec_text/text/train.txt", work / "uagec_text/text/test.txt"]


def uagec_x10_inputs(work: Path) -> list[Path]:
    """UA-GEC's text ten times over (kept by ``dedupe=False``): enough work for the workers to matter."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in uagec_inputs(work))
    path = work / "uagec_x10.txt"
    path.write_text("\n".join([text] * 10), encoding="utf-8")
    return [path]


CORPORA = {
    "konlpy": dict(inputs=lambda work: konlpy_inputs(),
                   options=dict(vocab_size=2000, valid=0.2, test=0.1, doc_boundary="file", family="bert",
                                shard_docs=1)),
    "uagec": dict(inputs=uagec_inputs,
                  options=dict(vocab_size=8000, valid=0.05, test=0.05, family="roberta", shard_docs=32)),
    "uagec_x10": dict(inputs=uagec_x10_inputs,
                      options=dict(vocab_size=8000, valid=0.05, test=0.05, family="roberta", shard_docs=128,
                                   dedupe=False, spm_input_sentences=50_000)),
}


def shard_bytes(out: Path) -> dict[str, bytes]:
    shards = {p.name: p.read_bytes() for p in sorted(out.glob("*.tar"))}
    return {**shards, "manifest.json": (out / "manifest.json").read_bytes()}


def bench(name: str, inputs: list[Path], work: Path, workers: list[int], repeats: int) -> list[dict]:
    rows, reference = [], None
    for w in workers:
        runs = []
        for r in range(repeats):
            out = work / f"{name}-w{w}-r{r}"
            shutil.rmtree(out, ignore_errors=True)
            stats = run_pipeline(inputs, out, workers=w, force=True, progress=False, **CORPORA[name]["options"])
            runs.append(stats)
            got = shard_bytes(out)
            reference = reference or got
            if got != reference:
                raise SystemExit(f"error: {name}: shards written with {w} workers differ from the first run's")
            if r:
                shutil.rmtree(out)
        splits = runs[0]["tokenize"]["splits"]
        med = {k: statistics.median(run[k]["seconds"] for run in runs) for k in ("clean", "split", "spm", "tokenize")}
        total = statistics.median(run["seconds"] for run in runs)
        sentences = sum(s["sentences"] for s in splits.values())
        rows.append({"corpus": name, "workers": w, "documents": sum(s["documents"] for s in splits.values()),
                     "sentences": sentences, "tokens": sum(s["tokens"] for s in splits.values()),
                     "shards": sum(len(s["shards"]) for s in splits.values()), **med, "total": total,
                     "tok_rate": sentences / med["tokenize"], "rate": sentences / total})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(prog="python benchmarks/bench_prepare.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=list(CORPORA))
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--work", type=Path, help="scratch directory (default: a temporary one, removed)")
    a = p.parse_args()
    set_quiet(True)
    work = a.work or Path(tempfile.mkdtemp(prefix="bench_prepare_"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for name in a.corpora:
            inputs = CORPORA[name]["inputs"](work)
            rows += bench(name, inputs, work, a.workers, a.repeats)
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"sentencepiece {sentencepiece.__version__}; median of {a.repeats} run(s); shards identical across worker "
          "counts: yes\n")
    print("| corpus | workers | docs | sentences | tokens | shards | clean s | split s | spm s | tokenize s "
          "| tokenize sent/s | pipeline s | pipeline sent/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['corpus']} | {r['workers']} | {r['documents']:,} | {r['sentences']:,} | {r['tokens']:,} | "
              f"{r['shards']} | {r['clean']:.2f} | {r['split']:.2f} | {r['spm']:.2f} | {r['tokenize']:.2f} | "
              f"{r['tok_rate']:,.0f} | {r['total']:.2f} | {r['rate']:,.0f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
