"""``python -m xpt_ds.cli.status RUN_DIR [RUN_DIR ...]``: where runs stand, one line each.

``running`` (rank 0's pid and host, the heartbeat's age), ``died (no heartbeat since ...)`` for a run whose
status.json says running but whose rank 0 is gone, or how it stopped (``xpt_ds.runtime.status``). The exit
status is the worst of the runs', for a script that requeues: 0 (running, finished, preempted, interrupted, not
started), 1 when a run has died (the same command resumes it), 3 when a run failed or halted (an error a person
must read: rerunning repeats it) or its status.json is none the trainer writes (not JSON, an unknown state), or
2 when a RUN_DIR is not a directory (a mistyped path: its line says so, and the others are still read), so that a
script takes neither a typo nor a damaged run for one that has not started.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from xpt_ds.errors import ArgumentParser, cli_errors
from xpt_ds.runtime.process_exit import exit_process
from xpt_ds.runtime.status import STATUS_NAME, describe, read_status, status_problem

SEVERITY = {"died": 1, "failed": 3, "halted": 3}  # a state's exit status; any other state's is 0
ORDER = [0, 1, 3, 2]  # a missing directory (2) outranks a failed run (3), which outranks a dead one (1)


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="xpt-ds status", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("run_dir", nargs="+", type=Path, help="run directory (the run config's run_dir)")
    p.add_argument("--json", action="store_true", help="each run's status.json as read (a dead run's state "
                   "'died', with 'died' saying why), one JSON object a line")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    worst = 0
    for run in a.run_dir:
        if not run.is_dir():
            worst = 2
            why = "not a directory" if run.exists() else "no such directory"
            print(json.dumps({"run_dir": str(run), "error": why}) if a.json else f"{run}: error: {why}")
            continue
        problem = status_problem(run)
        if problem is not None:
            worst = max(worst, 3, key=ORDER.index)
            print(json.dumps({"run_dir": str(run), "error": problem}) if a.json else f"{run}: error: {problem}")
            continue
        status = read_status(run)
        worst = max(worst, SEVERITY.get(status.get("state"), 0), key=ORDER.index)
        line = describe(status) if status else _no_status(run)
        print(json.dumps({"run_dir": str(run), **status}) if a.json else f"{run}: {line}")
    return worst


def _no_status(run: Path) -> str:
    """A directory without a status: a run yet to start, or a folder of runs given in place of them."""
    try:
        runs = sorted(p.name for p in run.iterdir() if (p / STATUS_NAME).is_file())
    except OSError:  # not readable: as a run yet to start
        runs = []
    if runs:
        shown = ", ".join(runs[:3]) + (f" and {len(runs) - 3} more" if len(runs) > 3 else "")
        return (f"no status: not a run directory, but {len(runs)} below it are ({shown}): "
                f"xpt-ds status {run}/*")
    return describe({})


if __name__ == "__main__":
    exit_process(main())
