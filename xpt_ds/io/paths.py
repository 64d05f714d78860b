"""File-system checks shared by the entry points (can a directory or an output file be written), and whole-file
writes that a reader never sees half done."""
from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path


def _file_in_path(directory: Path) -> Path | None:
    """``directory`` itself or a parent of it that exists as a file, not a directory."""
    return next((p for p in [directory, *directory.parents] if p.exists() and not p.is_dir()), None)


def unwritable(directory: Path, tag: str | int = 0) -> str | None:
    """Why files cannot be created in ``directory`` (made if missing), or None. Tries for real, because
    permission bits say nothing to root, and a read-only mount or an immutable directory says no to root too.
    ``tag`` keeps concurrent probes (one per rank) apart."""
    file = _file_in_path(directory)
    if file is not None:  # mkdir would say "File exists" or "Not a directory" without naming it
        return f"{file} is a file, not a directory"
    probe = directory / f".write_probe_{tag}_{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"x")
    except OSError as e:
        return e.strerror or str(e)
    finally:  # made, then its byte refused (a full disk): not left behind
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)
    return None


def unwritable_unmade(directory: Path) -> str | None:
    """``unwritable`` without making ``directory``: for a dry run, which changes nothing. One that exists gets the
    same probe (which leaves nothing behind); else a file in its path, or a nearest existing parent this user
    cannot create in (no permission, a read-only mount), is the reason."""
    if directory.is_dir():
        return unwritable(directory)
    file = _file_in_path(directory)
    if file is not None:
        return f"{file} is a file, not a directory"
    parent = next(p for p in directory.parents if p.is_dir())
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create a directory in {parent} (no permission, or a read-only file system)"
    return None


def check_output_file(path: Path, flag: str, inputs: dict[str, object] | None = None) -> None:
    """Raise OSError naming ``flag`` and the path when ``path`` cannot be written; checked before the work
    whose result it will hold, so that no result is computed and then lost. ``inputs`` (a flag -> the paths it
    gave, a shard spec's ``:split`` dropped): an existing file that is one of them, or lies in one of their
    directories (a manifest's: the corpus's), is not overwritten, unless it is an earlier result (``_a_result``:
    a sweep scores a run again into its directory). Until 2026-12-04 ``evaluate --out`` replaced a corpus's
    manifest.json or an export's config.json with its scores, without a word."""
    why = unwritable(path.parent)
    if why is None and path.is_dir():
        why = "is a directory"
    if why is not None:
        raise OSError(f"{flag} {path}: cannot write there ({why})")
    if path.exists() and not _a_result(path):  # a result of an earlier call is written again (a sweep's rescoring)
        target = path.resolve()
        for given, values in (inputs or {}).items():
            for value in values if isinstance(values, (list, tuple)) else [values]:
                if value is None:
                    continue
                own = Path(str(value).rsplit(":", 1)[0] if ":" in str(value) and not Path(str(value)).exists()
                           else str(value)).resolve()
                folder = own.parent if own.name == "manifest.json" else own  # a corpus: its every file
                if target == own or folder.is_dir() and folder in target.parents:
                    raise OSError(f"{flag} {path}: would overwrite {'' if target == own else 'a file of '}the "
                                  f"input {given} {value}; give another path")


def _a_result(path: Path) -> bool:
    """Whether ``path`` holds what an earlier evaluate or probe wrote: a JSON object with their ``seq_len``."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(found, dict) and "seq_len" in found


def write_text_atomic(path: Path, text: str, fsync: bool = False) -> None:
    """``path`` holds its old text or ``text``, never part of either: written beside it, then renamed over it
    (``fsync``: on disk before the rename, for a file that must survive a crash). UTF-8 whatever the locale; the
    file beside it is this process's own, and removed when the write fails; an OSError names ``path`` (write()
    and close() name no file: a full disk read "No space left on device" alone)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename == str(tmp):  # the file beside it: name the one asked for
            e.filename = None
        named = write_error(e, path) if isinstance(e, Exception) else None
        if named is not None:
            raise named from None
        raise


_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def write_error(e: Exception, path: Path) -> OSError | None:
    """``e`` as an OSError naming ``path``, for a failed write that names no file: an OSError of write() or close()
    (a full disk), or a Rust library's (tokenizers, safetensors) other exception ending "... (os error 28)"; None
    for any other exception, an OSError that names its file included."""
    if isinstance(e, OSError):  # one of errno's, not a message of its own
        return OSError(e.errno, e.strerror, str(path)) if e.filename is None and e.errno is not None else None
    found = _RUST_OS_ERROR.search(str(e))
    if found is None:
        return None
    code = int(found.group(1))
    return OSError(code, os.strerror(code), str(path))
