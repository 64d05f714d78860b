"""Summarise an interpreter log (benchmarks/interpreters/sitecustomize.py): CPU seconds and interpreter count
per test and per kind of process, largest first.

    XPT_INTERPRETER_LOG=/tmp/interp.jsonl PYTHONPATH=benchmarks/interpreters python3 -m pytest -q tests
    python3 benchmarks/interpreters/summarize.py /tmp/interp.jsonl [--top 40]"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def kind(argv: str) -> str:
    """What a process was, from its command line: a training rank, a launcher, pytest, or the script's name."""
    if "xpt_ds.cli.train" in argv or "xpt_ds/cli/train.py" in argv:
        return "training rank"
    if "torch/distributed/run.py" in argv or "torchrun" in argv.split(" ")[0]:
        return "torchrun"
    if "deepspeed/launcher/" in argv:
        return "deepspeed launcher"
    if "pytest" in argv or argv.startswith("-c"):
        return "pytest or python -c"
    return Path(argv.split(" ")[0]).name or "?"


def summarize(rows: list[dict]) -> dict[str, list[tuple[str, int, float]]]:
    """{"test": [(test, interpreters, cpu)], "kind": [...]}, each largest CPU first."""
    tables = {}
    for name, key in (("test", lambda r: r["test"].split(" ")[0] or "(outside a test)"),
                      ("kind", lambda r: kind(r["argv"]))):
        acc: dict[str, list] = defaultdict(lambda: [0, 0.0])
        for r in rows:
            acc[key(r)][0] += 1
            acc[key(r)][1] += r["cpu"]
        tables[name] = sorted(((k, n, round(c, 1)) for k, (n, c) in acc.items()), key=lambda x: -x[2])
    return tables


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log")
    p.add_argument("--top", type=int, default=40)
    a = p.parse_args(argv)
    rows = [json.loads(line) for line in Path(a.log).read_text().splitlines() if line.strip()]
    print(f"{len(rows)} interpreters, {sum(r['cpu'] for r in rows):.1f} CPU-s of their own")
    for name, table in summarize(rows).items():
        print(f"\n| {name} | interpreters | CPU-s |\n|---|---:|---:|")
        for k, n, c in table[:a.top]:
            print(f"| {k} | {n} | {c} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
