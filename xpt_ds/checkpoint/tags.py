"""Which checkpoints a run has: the ``COMPLETE`` marker that makes a tag count, tag names, ``best.json``, and
what a tag argument (``--resume``, ``--tag``, ``auto``, ``best``) resolves to. Plain files only: no torch or
DeepSpeed, so a sweep's driver or ``--dry-run`` reads a run's checkpoints without them
(``xpt_ds.checkpoint.store`` writes and loads the tags themselves)."""
from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from xpt_ds.errors import UserError

if TYPE_CHECKING:
    from xpt_ds.config import TrainConfig

MARKER = "COMPLETE"


class CheckpointError(UserError, RuntimeError):
    """A checkpoint could not be written or read; the message names the path and the cause."""


def tag_for(global_step: int) -> str:
    return f"global_step{global_step:09d}"


def tag_step(name: str) -> int | None:
    """The step a tag's name says (``tag_for``'s inverse); None for any other name: a folder a user put in
    ``checkpoints/`` (a backup copy) is not one of the run's tags, whatever it holds."""
    digits = name.removeprefix("global_step")
    return int(digits) if digits != name and len(digits) >= 9 and digits.isdigit() else None


class Removed(NamedTuple):
    """A tag ``prune`` or ``remove_incomplete`` took out of ``checkpoints/``; ``link``: where it pointed, when it
    was a symbolic link (the link went, its target stays)."""
    tag: str
    link: Path | None = None

    def __str__(self) -> str:
        return self.tag if self.link is None else f"{self.tag} (a link; its target {self.link} is kept)"


def _remove(tag_dir: Path, marker_first: bool) -> Removed:
    if tag_dir.is_symlink():  # the link, never what it points to
        target = Path(tag_dir.readlink())
        tag_dir.unlink()
        return Removed(tag_dir.name, target)
    if marker_first:
        (tag_dir / MARKER).unlink()
    shutil.rmtree(tag_dir, ignore_errors=not marker_first)
    return Removed(tag_dir.name)


def prune(ckpt_root: Path, keep_last: int, protected: str | None = None) -> list[Removed]:
    """Delete all but the newest ``keep_last`` complete checkpoints (rank 0), never ``protected`` (the run's best,
    checkpoint.keep_best). The marker goes first, so an interrupted delete leaves an incomplete directory, never a
    'complete' one with files missing. A tag that is a symbolic link (to another run's checkpoint, resumed from
    without a copy) loses the link alone, never its target's marker through it."""
    tags = complete_tags(ckpt_root)
    doomed = [t for t in tags[:-keep_last] if t != protected] if keep_last > 0 else []
    return [_remove(ckpt_root / tag, marker_first=True) for tag in doomed]


def remove_incomplete(ckpt_root: Path) -> list[Removed]:
    """Delete checkpoint directories without a marker (left by a crash or a failed save). Rank 0, only
    between saves."""
    doomed = sorted(d.name for d in ckpt_root.glob("global_step*")
                    if tag_step(d.name) is not None and d.is_dir() and not (d / MARKER).is_file())
    return [_remove(ckpt_root / name, marker_first=False) for name in doomed]


def read_marker(tag_dir: Path) -> dict:
    """A tag's ``COMPLETE`` record (global_step, and since 2026-11 world_size and zero_stage). A marker a save
    did not write (it writes it whole, atomically: an emptied or cut file, a sync gone wrong) is a one-line error
    naming it; nothing is deleted, since the tag's other files may be intact."""
    path = tag_dir / MARKER
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or not isinstance(record.get("global_step"), int):
            raise ValueError(f"no integer global_step in {record!r:.60}")
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint {tag_dir.name}: {path} is not the record a save writes ({e}); if the "
                              "tag is otherwise whole, rewrite it as {\"global_step\": STEP}, else move the tag "
                              "out of the run's checkpoints/") from None
    named = tag_step(tag_dir.name)
    if named is not None and record["global_step"] != named:  # it would sort as another step's, newest or not
        raise CheckpointError(f"checkpoint {tag_dir.name}: {path} records global_step {record['global_step']}, not "
                              f"the {named} of its name; if the tag is otherwise whole, rewrite it as "
                              f"{{\"global_step\": {named}}}, else move the tag out of the run's checkpoints/")
    return record


def complete_tags(ckpt_root: Path) -> list[str]:
    """Complete checkpoint tags, oldest first: the folders named as ``tag_for`` names them that hold a marker."""
    if not ckpt_root.is_dir():
        return []
    tags = [d for d in ckpt_root.iterdir() if tag_step(d.name) is not None and (d / MARKER).is_file()]
    return [d.name for d in sorted(tags, key=lambda d: read_marker(d)["global_step"])]


BEST_FILE = "best.json"  # RUN_DIR/best.json: the run's best checkpoint (xpt_ds.training.best)


class NoBestError(CheckpointError):
    """The tag name ``best`` was asked for, but the run records no best checkpoint, or none that can be read."""


def read_best(run_dir: Path) -> str:
    """The tag ``RUN_DIR/best.json`` records; a one-line error naming the run if there is none, and naming the
    file if it is not the record a run writes (whole, atomically: an emptied or cut file is a copy or sync gone
    wrong)."""
    path = Path(run_dir) / BEST_FILE
    if not path.is_file():
        raise NoBestError(f"run {run_dir} records no best checkpoint ({path} is missing: checkpoint.keep_best "
                          f"was off, or no validation pass has run)")
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or not isinstance(record.get("tag"), str) or not record["tag"]:
            raise ValueError(f"no tag name in {record!r:.60}")
    except (ValueError, UnicodeDecodeError) as e:
        raise NoBestError(f"run {run_dir}: {path} is not the record a run writes ({e}): rewrite it as "
                          "{\"tag\": \"TAG\"} naming the best checkpoint, or delete it (a resume writes it "
                          "again from the checkpoint's record)") from None
    return record["tag"]


class UnknownTag(CheckpointError):
    """A tag asked for (``--resume``, ``--tag``) that is not a complete checkpoint of the run."""


def _choices(ckpt_root: Path, tags: list[str], names: tuple[str, ...]) -> str:
    """What a tag argument may be: ``names``, 'best' when the run records one it can read, its complete tags
    (newest first, the 6 newest of many)."""
    with contextlib.suppress(NoBestError):  # a run with no readable best.json offers no 'best'
        read_best(ckpt_root.parent)
        names += ("best",)
    newest = tags[::-1][:6] + ([f"... ({len(tags) - 6} older)"] if len(tags) > 6 else [])
    return ", ".join(names) + (f", or a complete checkpoint: {', '.join(newest)}" if tags else
                               " (the run has no complete checkpoint)")


def resolve_tag(ckpt_root: Path, resume: str, flag: str = "--tag", names: tuple[str, ...] = ("auto",)) -> str | None:
    """'none' -> None; 'auto' -> newest complete tag or None; 'best' -> the run's best (``RUN_DIR/best.json``,
    written with checkpoint.keep_best); else the tag, which must be complete. Any other value is an UnknownTag (a
    NoBestError for 'best' without one) naming ``flag``, the value and what it may be (``names`` and the tags)."""
    if resume == "none":
        return None
    tags = complete_tags(ckpt_root)
    if resume == "auto":
        return tags[-1] if tags else None
    asked = resume
    if resume == "best":
        try:
            resume = read_best(ckpt_root.parent)
        except NoBestError as e:
            raise NoBestError(f"{flag} best: {e}; valid: {_choices(ckpt_root, tags, names)}") from None
    if resume not in tags:
        found = ckpt_root / resume
        half = ("" if not found.is_dir() else " (an incomplete save: no COMPLETE marker)" if not
                (found / MARKER).is_file() else f" (not a tag's name, such as {tag_for(1)})")
        value = f"best ({BEST_FILE}'s {resume})" if asked == "best" else f"'{resume}'"
        raise UnknownTag(f"{flag} {value} is not a complete checkpoint of run {ckpt_root.parent}{half}; valid: "
                         f"{_choices(ckpt_root, tags, names)}")
    return resume


def bad_resume(cfg: TrainConfig) -> str | None:
    """Why ``cfg.checkpoint.resume`` (``--resume``) names no checkpoint of the run, or None: checked before the
    run directory is locked or written, so a mistyped tag leaves a run (its status.json too) as it was. A marker
    that cannot be read is left to the trainer's checks, which report it as the run's failure."""
    try:
        resolve_tag(Path(cfg.run_dir) / "checkpoints", cfg.checkpoint.resume, "--resume", ("auto", "none"))
    except (UnknownTag, NoBestError) as e:
        return str(e)
    except CheckpointError:  # an unreadable marker: the trainer's own checks report it
        return None
    return None
