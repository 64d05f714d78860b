"""An export's ``--out`` folder: what an export may replace there (an earlier export, by the record of the files it
wrote), and how the finished export, written in a staging folder first, takes its place: renamed over ``out``, or
moved in file by file where ``out`` cannot be renamed (a mount point, the working directory or one above it). A
stop at any point leaves ``out`` as it was or as a folder the next export replaces whole."""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path


def check_export_out(out: Path) -> None:
    """``out`` may be missing, empty, or an earlier export (its config.json names an ``xpt_method``, read as
    JSON); anything else would be mixed with the export's files or replaced, so it is refused."""
    if not out.exists():
        return
    if not out.is_dir():
        raise OSError(f"--out {out}: is not a directory")
    if not any(not p.name.startswith(STAGING) for p in out.iterdir()):
        return
    try:
        earlier = "xpt_method" in json.loads((out / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        earlier = (out / EXPORT_RECORD).is_file()  # an export into it in place, stopped half-way
    if not earlier:
        raise OSError(f"--out {out}: is not empty and holds no earlier xpt-ds export (no config.json with "
                      "xpt_method); give a new or empty directory")


STAGING = ".xpt-export.writing-"  # an export filled in place is written in OUT/.xpt-export.writing-PID first
EXPORT_RECORD = "xpt_export.json"  # the files an export wrote: a later export into its folder replaces only those
# What an export without that record (written before 2026-11-28) may hold of its own: save_pretrained's model and
# config files, every tokenizer file (a keep_vocab export copies the source's), the code an export ships.
EXPORT_FILES = ("config.json", "generation_config.json", "model*.safetensors", "model.safetensors.index.json",
                "pytorch_model*.bin", "tokenizer*.json", "special_tokens_map.json", "added_tokens.json", "spm.model",
                "*.bpe.model", "sentencepiece*.model", "vocab.*", "merges.txt", "chat_template.*", "xpt_*.py")


def new_staging(out: Path, in_place: bool) -> Path:
    """An empty folder of this process to write the export in: inside ``out`` when it is filled ``in_place``,
    else beside it, on the same file system, so that a rename puts it in place."""
    staging = out / f"{STAGING}{os.getpid()}" if in_place else out.parent / f".{out.name}.writing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    return staging


def record_files(staging: Path) -> None:
    files = {str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()} | {EXPORT_RECORD}
    (staging / EXPORT_RECORD).write_text(json.dumps({"files": sorted(files)}, indent=1) + "\n")


def written_by_earlier(out: Path) -> Callable[[str], bool]:
    """Whether the earlier export in ``out`` wrote the file of that relative name (its record; for an export
    from before the record, whether it is a file an export writes: ``EXPORT_FILES``)."""
    try:
        return set(json.loads((out / EXPORT_RECORD).read_text())["files"]).__contains__
    except (OSError, ValueError, KeyError, TypeError):
        return lambda name: any(fnmatch.fnmatch(name, p) for p in EXPORT_FILES)


def _files(out: Path) -> list[str]:
    """The files under ``out`` by relative name, but those of an export being written in it (``STAGING``)."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*")
                  if p.is_file() and not p.relative_to(out).parts[0].startswith(STAGING))


def carry_own_files(out: Path, staging: Path, copy: bool = True) -> list[tuple[str, bool]]:
    """Copy into ``staging`` (``copy``; else they stay where they are) the files of ``out`` that the earlier export
    there did not write (not in its record; for an export from before the record, none an export writes:
    ``EXPORT_FILES``); (name, whether the new export writes a file of that name, which then wins)."""
    earlier = written_by_earlier(out)
    carried = []
    for name in _files(out):
        if earlier(name):
            continue
        target = staging / name
        carried.append((name, target.exists()))
        if copy and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(out / name, target)  # a copy: ``out`` stays whole until the swap
    return carried


def put_in_place(staging: Path, out: Path) -> None:
    """``staging`` becomes ``out``; the earlier ``out`` is moved aside first and removed after."""
    aside = out.parent / f".{out.name}.replaced-{os.getpid()}"
    if out.exists():
        out.rename(aside)
    try:
        staging.rename(out)
    except OSError:
        if aside.exists():
            aside.rename(out)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def in_place(out: Path) -> bool:
    """Whether the export fills ``out`` where it is rather than replace it by a rename: a mount point cannot be
    renamed (EBUSY, after the whole export was written), and renaming the working directory or one above it would
    leave the shell that ran the export in the removed copy."""
    if not out.is_dir():
        return False
    try:
        cwd = Path.cwd()
    except OSError:  # the working directory was removed
        cwd = None
    return _mount_point(out) or (cwd is not None and cwd.is_relative_to(out))


def _mount_point(path: Path) -> bool:
    """``os.path.ismount``, which misses a bind mount of a directory of the same file system, or a mount point
    that /proc/self/mountinfo lists (octal escapes: ``\\040`` is a space)."""
    if os.path.ismount(path):
        return True
    try:
        table = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return False
    unescape = lambda field: re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)  # noqa: E731
    return any(len(f := line.split()) > 4 and unescape(f[4]) == str(path) for line in table.splitlines())


def fill_in_place(staging: Path, out: Path) -> None:
    """Move the finished export in ``staging`` (a folder in ``out``) into ``out``, in place of the earlier export's
    files, in an order that makes ``out`` look like a complete export only once it is one: first a record naming
    the files of both (an export stopped from here on is replaced whole by the next one), then the earlier
    config.json goes (a folder without one loads as no model), the earlier export's other files, the new files
    come in, and the new config.json and record last. The user's files stay where they are."""
    earlier = written_by_earlier(out)
    old = [name for name in _files(out) if earlier(name)]
    new = json.loads((staging / EXPORT_RECORD).read_text())["files"]
    both = out / f".{EXPORT_RECORD}.writing-{os.getpid()}"
    both.write_text(json.dumps({"files": sorted(set(old) | set(new))}, indent=1) + "\n")
    os.replace(both, out / EXPORT_RECORD)
    for name in sorted(set(old) - {EXPORT_RECORD}, key=lambda n: n != "config.json"):
        (out / name).unlink(missing_ok=True)
    last = [n for n in ("config.json", EXPORT_RECORD) if n in new]
    for name in [n for n in new if n not in last] + last:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / name, out / name)
