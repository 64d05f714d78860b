"""Branches of a run: a resume from an older checkpoint tag (or from none) starts a new branch, and what the branch
it leaves wrote after that tag (its later checkpoints, the phase ends it kept) moves to ``abandoned/branch-N/``
under the checkpoint root, where ``resume: auto`` no longer sees it. Nothing is deleted: moving is a rename.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import deepspeed

from xpt_ds.checkpoint.phase_ends import PHASE_ENDS, phase_end_files
from xpt_ds.checkpoint.store import fsync_dir
from xpt_ds.checkpoint.tags import complete_tags, read_marker

log = logging.getLogger(__name__)

ABANDONED = "abandoned"


def abandon_later(ckpt_root: Path, tag: str | None) -> tuple[list[str], Path | None]:
    """A run resumed from an older tag (or started over, ``tag`` None) begins a new branch: the complete
    checkpoints after ``tag`` belong to the branch it leaves. They move to ``abandoned/branch-N/`` (rank 0;
    moving is a rename, nothing is deleted), where ``resume: auto`` no longer sees them, so a requeued job
    continues the branch it was on, not the old one. Returns the moved tags and where they went."""
    step = -1 if tag is None else read_marker(ckpt_root / tag)["global_step"]
    later = [t for t in complete_tags(ckpt_root) if read_marker(ckpt_root / t)["global_step"] > step]
    if not later:
        return [], None
    dest = _branch_dir(ckpt_root, tag)
    for t in later:
        os.replace(ckpt_root / t, dest / t)
    fsync_dir(ckpt_root)
    return later, dest


def _branch_dir(ckpt_root: Path, tag: str | None) -> Path:
    """A new ``abandoned/branch-N/`` for what a run resumed from ``tag`` leaves behind: N one past the highest
    there, so a branch the user deleted leaves a gap, never a number taken twice."""
    numbers = [int(d.name[len("branch-"):]) for d in (ckpt_root / ABANDONED).glob("branch-*")
               if d.name[len("branch-"):].isdigit()] if (ckpt_root / ABANDONED).is_dir() else []
    dest = ckpt_root / ABANDONED / f"branch-{max(numbers, default=0) + 1:03d}"
    dest.mkdir(parents=True)
    (dest / "README").write_text(f"checkpoints of a branch abandoned when a run resumed from {tag or 'scratch'}\n")
    return dest


def abandon_phase_ends(ckpt_root: Path, tag: str | None, kept: set[str], dest: Path | None
                       ) -> tuple[list[str], Path | None]:
    """The kept phase ends (``phase_ends/NAME.*``) that the state at ``tag`` does not record (``kept``) were
    written after it by the branch a resume from ``tag`` leaves: they move (rank 0; a rename, nothing deleted) to
    ``dest/phase_ends/`` (the branch's ``abandoned/branch-N/``, made if None), so that the new branch writes and
    reads its own and the abandoned checkpoints keep theirs. Returns the moved phase names and where they went."""
    later = sorted({f.stem for f in (ckpt_root / PHASE_ENDS).iterdir() if f.suffix in (".pt", ".safetensors")
                    and f.stem not in kept}) if (ckpt_root / PHASE_ENDS).is_dir() else []
    if not later:
        return [], None
    out = (dest or _branch_dir(ckpt_root, tag)) / PHASE_ENDS
    out.mkdir(parents=True, exist_ok=True)
    for name in later:
        for f in phase_end_files(ckpt_root, name):
            os.replace(f, out / f.name)
    fsync_dir(ckpt_root / PHASE_ENDS)
    return later, out


def start_branch(ckpt_root: Path, tag: str | None, kept: set[str], rank: int) -> None:
    """An explicit resume from ``tag`` (or ``none``) leaves the later checkpoints' trajectory, and the phase ends
    that branch kept after ``tag`` (those the state at ``tag`` does not record, ``kept``): rank 0 moves them aside
    (``abandon_later``, ``abandon_phase_ends``), and every rank waits for it."""
    if rank == 0:
        moved, dest = abandon_later(ckpt_root, tag)
        if moved:
            log.warning("resuming from %s starts a new branch: moved %d later checkpoint(s) of the abandoned "
                        "branch (%s) to %s; resume: auto now continues this branch", tag or "scratch",
                        len(moved), ", ".join(moved), dest)
        ends, where = abandon_phase_ends(ckpt_root, tag, kept, dest)
        if ends:
            log.warning("resuming from %s: moved the end of phase(s) %s, which the branch it leaves kept after "
                        "%s, to %s; this branch keeps its own", tag or "scratch", ", ".join(ends),
                        tag or "the start", where)
    deepspeed.comm.barrier()
