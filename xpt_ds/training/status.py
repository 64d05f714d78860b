"""RUN_DIR/status.json: where the run stands, for a person (`cat`) or a script (`json.load`). Rank 0 only,
rewritten atomically at every log step, checkpoint and exit."""
from __future__ import annotations

import json
import time
from pathlib import Path

from xpt_ds.io.paths import write_text_atomic


def write_status(run_dir: Path, **fields) -> None:
    status = {"updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **fields}
    write_text_atomic(run_dir / "status.json", json.dumps(status, indent=2) + "\n")


def planned_steps(state, phase_steps: list[int], phase_stopped: bool) -> int:
    """Optimizer steps done (``state``: the trainer's global_step, phase_index and phase_step) plus those still
    to run: the rest of the current phase (none once early stopping ended it, guard.early_stop_patience) and every
    later phase's planned steps."""
    current = 0 if phase_stopped else phase_steps[state.phase_index] - state.phase_step
    return state.global_step + current + sum(phase_steps[state.phase_index + 1:])
