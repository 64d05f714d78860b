"""What a training job's ranks say as they end (an ``error:`` line, ``preempted: ...``): once per machine when
they say the same, and a rank's own line too when it differs (a message that depends on the rank names it).

A bad config key, a missing file or a NaN loss stops every rank with the same line: 64 ranks printed it 64 times.
No collective can be trusted once a rank has failed, so the ranks of one machine compare through a file instead:
local rank 0 writes its line to ``TMPDIR/xpt_ds_said_UID_PPID`` (the ranks of one launch on one machine share a
parent: the ``deepspeed`` launcher's per-node process, the torchrun agent, or srun's step daemon) before it prints
it; another rank prints its line only if local rank 0's differs, or none came within ``WAIT_S``. A rank that
fails alone (its own shard) still says why, a moment later.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

from xpt_ds.errors import say
from xpt_ds.io.paths import write_text_atomic

WAIT_S = 0.5  # how long another rank waits for local rank 0's line before it prints its own
STALE_S = 3600  # older markers (a launch's parent whose PID came round again) are not read, and are removed


def _env_int(*names: str, default: int) -> int:
    for name in names:
        if os.environ.get(name, "").strip().lstrip("-").isdigit():
            return int(os.environ[name])
    return default


def _marker() -> Path:
    return Path(tempfile.gettempdir()) / f"xpt_ds_said_{os.getuid()}_{os.getppid()}"


def _fresh_line(path: Path) -> str | None:
    """The line local rank 0 wrote for this launch, or None (none yet, or one left by an earlier launch)."""
    try:
        if time.time() - path.stat().st_mtime > STALE_S:
            return None
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


# Every file operation here is best effort: a temp folder that cannot be written or read only means that the
# other ranks of the machine print their line too, as they all did before.
_BEST_EFFORT = contextlib.suppress(OSError, ValueError)  # ValueError: a line the locale cannot encode


def _remove_stale(directory: Path) -> None:
    with _BEST_EFFORT:
        for old in directory.glob(f"xpt_ds_said_{os.getuid()}_*"):
            if time.time() - old.stat().st_mtime > STALE_S:
                old.unlink()


def local_rank() -> int:
    return _env_int("LOCAL_RANK", "SLURM_LOCALID", default=0)


def _world() -> int:
    return _env_int("WORLD_SIZE", "SLURM_NTASKS", default=1)


def forget() -> None:
    """Local rank 0, as the job starts: no line of an earlier launch with the same parent is read as this one's."""
    if local_rank() == 0 and _world() > 1:
        with _BEST_EFFORT:
            _marker().unlink()


def say_once(line: str, wait_s: float = WAIT_S) -> None:
    """Print ``line`` (one line, or a config's problems a line each) for this rank, unless local rank 0 of this
    launch printed the same."""
    if _world() <= 1:
        say(line)
        return
    marker = _marker()
    if local_rank() == 0:
        _remove_stale(marker.parent)
        with _BEST_EFFORT:  # a whole line or none, for the ranks polling it
            write_text_atomic(marker, line)
        say(line)
        return
    deadline = time.monotonic() + wait_s
    said = _fresh_line(marker)
    while said is None and time.monotonic() < deadline:
        time.sleep(0.02)
        said = _fresh_line(marker)
    if said != line:
        say(line)
