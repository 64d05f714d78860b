"""Step 4 of ``launch/gpu_uagec.sh`` (and its ``--pack``) before the archive: the reports and the verdicts.

    python -m experiments.uagec.pack --out OUT

The report of every sweep this session did not finish (no exit-0 line in ``OUT/steps.tsv`` since its last
``unpack``: a sweep stopped at the budget's end wrote none) is rewritten from its results.jsonl rows so far
(``xpt_ds.sweeps.report``, no TensorBoard scalars: those stay the sweep's own), then ``OUT/claims.md``
(``experiments.uagec.claims``). A failure of either is reported and the rest still runs: the script then packs
what there is (``pack_results`` of launch/session_steps.sh).
"""
from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from xpt_ds.errors import cli_errors
from xpt_ds.sweeps import report

from experiments.uagec import claims

SWEEPS = ("pilot", *claims.SWEEPS)  # OUT's sweep folders, each a step of the script (pilot, sweep_NAME)


def step_of(sweep: str) -> str:
    """The name of the script's step that runs ``sweep``."""
    return "pilot" if sweep == "pilot" else f"sweep_{sweep}"


def finished_steps(steps_tsv: Path) -> list[str]:
    """The steps that exited 0 after the last ``unpack`` line of steps.tsv (NAME, exit code, seconds a line),
    in order: the steps of this invocation of the script, which unpacks first. None without the file."""
    finished: list[str] = []
    lines = steps_tsv.read_text().splitlines() if steps_tsv.is_file() else []
    for line in lines:
        name, _, rest = line.partition("\t")
        if name == "unpack":
            finished = []
        if rest.split("\t")[0] == "0":  # an unpack that exited 0 is itself the first finished step
            finished.append(name)
    return finished


def unfinished_sweeps(out: Path, sweeps: tuple[str, ...] = SWEEPS) -> list[Path]:
    """OUT's sweep folders (of ``sweeps``: a study's, each its script's step ``step_of``) with rows
    (results.jsonl) whose step did not finish in this invocation."""
    finished = set(finished_steps(out / "steps.tsv"))
    return [out / name for name in sweeps
            if (out / name / "results.jsonl").is_file() and step_of(name) not in finished]


def _run(what: str, main, argv: list[str]) -> bool:
    """``main(argv)`` in this process; a non-zero status or an exception (its traceback on stderr) is reported as
    '``pack: WHAT failed``' and does not stop the packing."""
    try:
        ok = main(argv) == 0
    except Exception:  # a report of rows no check foresaw: the other reports and the archive still matter more
        traceback.print_exc()
        ok = False
    except SystemExit as e:  # argparse
        ok = not e.code
    if not ok:
        print(f"pack: {what} failed", file=sys.stderr)
    return ok


def write_reports(out: Path, sweeps: tuple[str, ...] = SWEEPS, verdicts=claims.main) -> bool:
    """The unfinished sweeps' reports, then the verdicts (a study's claims ``main``: this one's, or issue 57's
    ``experiments.decoder.claims``); False when either failed."""
    unfinished = unfinished_sweeps(out, sweeps)
    ok = not unfinished or _run("a report", report.main, ["--no-tensorboard", *map(str, unfinished)])
    return _run("claims", verdicts, ["--out", str(out)]) and ok


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.uagec.pack", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="launch/gpu_uagec.sh's OUT")
    a = p.parse_args(argv)
    write_reports(a.out)
    return 0  # a failed report is in the log; the archive is made all the same


if __name__ == "__main__":
    raise SystemExit(main())
