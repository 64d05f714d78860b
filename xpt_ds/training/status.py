"""RUN_DIR/status.json: where the run stands, for a person (`cat`) or a script (`json.load`). Rank 0 only,
rewritten atomically at every log step, checkpoint and exit."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from xpt_ds.io.paths import write_text_atomic


def write_status(run_dir: Path, **fields) -> None:
    status = {"updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **fields}
    write_text_atomic(run_dir / "status.json", json.dumps(status, indent=2) + "\n")


def mark_stopped(run_dir: Path, state: str, error: str) -> None:
    """A run that stopped before its trainer could write its status (a bad shard, tokenizer or checkpoint found
    while it was being built): ``state`` and ``error`` replace what status.json said (a previous attempt's
    'running' or 'preempted'), its other fields (that attempt's steps and checkpoint) stay. Nothing is written
    into a run directory that does not exist."""
    path = run_dir / "status.json"
    if not run_dir.is_dir():
        return
    try:
        old = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        old = {}
    kept = {k: v for k, v in old.items() if k != "updated"} if isinstance(old, dict) else {}
    write_status(run_dir, **{**kept, "state": state, "error": error})


UNSTARTED_FILES = {"embedding_init.json", ".run.lock"}  # what a run writes before its first checkpoint or log row


def remove_unstarted(run_dir: Path) -> bool:
    """Remove ``run_dir`` (made by this attempt, which failed before it was set up) when it holds nothing but
    empty folders and the embedding-init report: a config or data error leaves no run directory behind. False,
    and nothing removed, when it holds anything else."""
    if not run_dir.is_dir():
        return True
    if any(p.is_file() and p.name not in UNSTARTED_FILES or p.is_symlink() for p in run_dir.rglob("*")):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return True


def planned_steps(state, phase_steps: list[int], phase_stopped: bool) -> int:
    """Optimizer steps done (``state``: the trainer's global_step, phase_index and phase_step) plus those still
    to run: the rest of the current phase (none once early stopping ended it, guard.early_stop_patience) and every
    later phase's planned steps."""
    current = 0 if phase_stopped else phase_steps[state.phase_index] - state.phase_step
    return state.global_step + current + sum(phase_steps[state.phase_index + 1:])
