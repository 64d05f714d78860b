"""Step 4 of ``launch/gpu_decoder.sh`` (and its ``--pack``) before the archive: the reports and the verdicts.

    python -m experiments.decoder.pack --out OUT

The report of every sweep this session did not finish (no exit-0 ``sweep_NAME`` line in ``OUT/steps.tsv`` since
its last ``unpack``: a sweep stopped at the budget's end wrote none) is rewritten from its results.jsonl rows so
far (``xpt_ds.sweeps.report``, no TensorBoard scalars), then ``OUT/claims.md`` (``experiments.decoder.claims``).
A failure of either is reported and the rest still runs: the script then packs what there is.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from xpt_ds.errors import cli_errors
from xpt_ds.sweeps import report

from experiments.decoder import claims
from experiments.uagec.pack import _run, finished_steps

SWEEPS = ("target", "keep_vocab", "extend")  # OUT's sweep folders, each the script's step sweep_NAME


def unfinished_sweeps(out: Path) -> list[Path]:
    """OUT's sweep folders with rows whose step did not finish in this invocation of the script."""
    finished = set(finished_steps(out / "steps.tsv"))
    return [out / name for name in SWEEPS
            if (out / name / "results.jsonl").is_file() and f"sweep_{name}" not in finished]


def write_reports(out: Path) -> bool:
    """The unfinished sweeps' reports, then the verdicts; False when either failed."""
    unfinished = unfinished_sweeps(out)
    ok = not unfinished or _run("a report", report.main, ["--no-tensorboard", *map(str, unfinished)])
    return _run("claims", claims.main, ["--out", str(out)]) and ok


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.decoder.pack", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="launch/gpu_decoder.sh's OUT")
    a = p.parse_args(argv)
    write_reports(a.out)
    return 0  # a failed report is in the log; the archive is made all the same


if __name__ == "__main__":
    raise SystemExit(main())
