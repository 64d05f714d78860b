"""Each test's CPU time, its own and that of every process it started and reaped (launchers, ranks, forked
children, killed jobs): a pytest plugin, where ``sitecustomize.py`` beside it logs only the interpreters that exit
normally. With this directory on ``PYTHONPATH``:

    XPT_TEST_CPU_LOG=FILE PYTHONPATH=benchmarks/interpreters python3 -m pytest -q -p cpu_per_test tests
    python3 benchmarks/interpreters/cpu_per_test.py FILE        # per file, heaviest first

One JSON line per test: its node id, ``self`` (the pytest worker's CPU seconds in it), ``kids`` (its reaped
descendants', from ``RUSAGE_CHILDREN``), ``wall`` and the xdist worker. Processes that outlive the test, or that
another process reaps (a Slurm job's ranks, slurmd's children), are not counted.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict

import pytest


def _cpu() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get("XPT_TEST_CPU_LOG")
    if not path:
        yield
        return
    (own, kids), start = _cpu(), time.time()
    yield
    own_after, kids_after = _cpu()
    row = {"id": item.nodeid, "self": round(own_after - own, 2), "kids": round(kids_after - kids, 2),
           "wall": round(time.time() - start, 2), "worker": os.environ.get("PYTEST_XDIST_WORKER")}
    with open(path, "a") as f:  # one short append per test
        f.write(json.dumps(row) + "\n")


def by_file(rows: list[dict]) -> list[tuple[str, float, float, float, int]]:
    """(file, CPU seconds, of them the worker's own, wall seconds, tests), heaviest first."""
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for r in rows:
        f = files[r["id"].split("::")[0]]
        f[0] += r["self"] + r["kids"]
        f[1] += r["self"]
        f[2] += r["wall"]
        f[3] += 1
    return sorted(((name, *v) for name, v in files.items()), key=lambda t: -t[1])


def main(argv: list[str]) -> int:
    rows = [json.loads(line) for line in open(argv[0])]
    total = sum(r["self"] + r["kids"] for r in rows)
    print(f"{len(rows)} tests, {total:.1f} CPU-s ({sum(r['self'] for r in rows):.1f} in the pytest workers)\n")
    print("| file | CPU-s | of it the worker's | wall s | tests |\n|---|---:|---:|---:|---:|")
    for name, cpu, own, wall, n in by_file(rows):
        print(f"| {name} | {cpu:.1f} | {own:.1f} | {wall:.1f} | {n} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
