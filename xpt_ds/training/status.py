"""RUN_DIR/status.json: where the run stands, for a person (`cat`) or a script (`json.load`). Rank 0 only,
rewritten atomically at every log step, checkpoint and exit."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


def write_status(run_dir: Path, **fields) -> None:
    status = {"updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **fields}
    tmp = run_dir / "status.json.tmp"
    tmp.write_text(json.dumps(status, indent=2) + "\n")
    os.replace(tmp, run_dir / "status.json")


def steps_left(phase_steps: list[int], phase_index: int, phase_step: int, phase_stopped: bool, finished: bool) -> int:
    """Optimizer steps still to run: the rest of the current phase (none once early stopping ended it,
    guard.early_stop_patience) and every later phase's planned steps; none once the run finished."""
    if finished:
        return 0
    current = 0 if phase_stopped else phase_steps[phase_index] - phase_step
    return current + sum(phase_steps[phase_index + 1:])
