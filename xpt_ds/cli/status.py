"""``python -m xpt_ds.cli.status RUN_DIR [RUN_DIR ...]``: where runs stand, one line each.

``running`` (rank 0's pid and host, the heartbeat's age), ``died (no heartbeat since ...)`` for a run whose
status.json says running but whose rank 0 is gone, or how it stopped (``xpt_ds.runtime.status``). Exit 0, 1
when a run has died, or 2 when a RUN_DIR is not a directory (a mistyped path: its line says so, and the others are
still read), so that a script that checks the status does not take a typo for a run that has not started.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from xpt_ds.errors import cli_errors
from xpt_ds.runtime.process_exit import exit_process
from xpt_ds.runtime.status import describe, read_status


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="xpt-ds status", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("run_dir", nargs="+", type=Path, help="run directory (the run config's run_dir)")
    p.add_argument("--json", action="store_true", help="each run's status.json as read (a dead run's state "
                   "'died', with 'died' saying why), one JSON object a line")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    died = missing = False
    for run in a.run_dir:
        if not run.is_dir():
            missing = True
            print(json.dumps({"run_dir": str(run), "error": "no such directory"}) if a.json
                  else f"{run}: error: no such directory")
            continue
        status = read_status(run)
        died |= status.get("state") == "died"
        print(json.dumps({"run_dir": str(run), **status}) if a.json else f"{run}: {describe(status)}")
    return 2 if missing else 1 if died else 0


if __name__ == "__main__":
    exit_process(main())
