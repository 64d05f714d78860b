"""The output directory's layout and each stage's completion record under ``OUT/.prepare``.

A stage records a fingerprint (``key``) of its inputs and options and the sizes of its outputs; a later run
with the same key whose outputs still have those sizes skips the stage. Outputs are written through
``HashingWriter`` (temp file, renamed on commit) so a killed run never leaves a half-written file behind a
valid record, and ``exclusive`` keeps two runs out of the same directory.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from data_tools.errors import PrepareError
from data_tools.pipeline.shards import atomic_write_text, sentences_of

SPLITS = ("train", "valid", "test")
STATE = Path(".prepare")
CORPUS = Path("sentences") / "corpus.jsonl"
STAGE_VERSION = 1  # bump when a stage's output for the same inputs changes


def split_path(out: Path, split: str) -> Path:
    return out / "sentences" / f"{split}.jsonl"


def fingerprint(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def load_state(out: Path, stage: str) -> dict | None:
    try:
        return json.loads((out / STATE / f"{stage}.json").read_text())
    except (OSError, ValueError):
        return None


def up_to_date(out: Path, stage: str, key: str) -> dict | None:
    """The stage's record if it was completed with ``key`` and its outputs still have their recorded sizes."""
    state = load_state(out, stage)
    if not state or state.get("key") != key:
        return None
    for rel, meta in state.get("outputs", {}).items():
        try:
            if (out / rel).stat().st_size != meta["bytes"]:
                return None
        except OSError:
            return None
    return state


def save_state(out: Path, stage: str, key: str, outputs: dict[str, dict], stats: dict) -> dict:
    state = {"key": key, "outputs": outputs, "stats": stats}
    atomic_write_text(out / STATE / f"{stage}.json", json.dumps(state, indent=1, ensure_ascii=False) + "\n")
    return state


def drop_state(out: Path, *stages: str) -> None:
    for stage in stages:
        (out / STATE / f"{stage}.json").unlink(missing_ok=True)


class HashingWriter:
    """Binary file written to ``path.tmp`` and renamed on ``commit``; tracks sha256 and size."""

    def __init__(self, path: Path):
        self.path, self.tmp = path, path.with_name(path.name + ".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.tmp, "wb")
        self.sha, self.bytes = hashlib.sha256(), 0

    @classmethod
    def reopen(cls, path: Path, f, sha, nbytes: int) -> HashingWriter:
        """A writer that continues ``path.tmp``, open as ``f`` at its byte ``nbytes``, whose sha256 so far is ``sha``
        (the clean stage's resume)."""
        self = cls.__new__(cls)
        self.path, self.tmp, self.f, self.sha, self.bytes = path, path.with_name(path.name + ".tmp"), f, sha, nbytes
        return self

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.sha.update(data)
        self.bytes += len(data)

    def sync(self) -> None:
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()

    def commit(self) -> dict:
        self.sync()
        self.f.close()
        os.replace(self.tmp, self.path)
        return {"bytes": self.bytes, "sha256": self.sha.hexdigest()}

    def abort(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)


def file_signature(path: Path) -> dict:
    """sha256, size, lines and sentences of a jsonl document file (for files this tool did not record)."""
    sha, size, docs, sents = hashlib.sha256(), 0, 0, 0
    with open(path, "rb") as f:
        for line in f:
            sha.update(line)
            size += len(line)
            docs += 1
            sents += len(sentences_of(line, path, docs))
    return {"bytes": size, "sha256": sha.hexdigest(), "documents": docs, "sentences": sents}


def _missing(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, innermost first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _lock(path: Path):
    """An open ``path`` holding an exclusive flock, the file still at ``path`` (a failed run that made the lock
    unlinks it: one that opened it just before that would otherwise lock a file no later run sees)."""
    import fcntl
    while True:
        f = open(path, "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise PrepareError(f"another data_tools.cli.prepare is working in {path.parent.parent}") from None
        try:
            if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                return f
        except FileNotFoundError:  # a failed run unlinked the lock file we opened: open the new one
            pass
        f.close()


@contextlib.contextmanager
def exclusive(out: Path):
    """Make ``out`` and hold ``OUT/.prepare/lock`` so two runs never write the same directory at once. A run that
    fails leaves no trace it alone made: the lock when it made it, and the folders it made (``out``, its missing
    parents, ``.prepare``, ``sentences``) while they are empty, so an empty input leaves nothing behind. What
    existed before is never removed."""
    made = [] if (out / "sentences").exists() else [out / "sentences"]  # innermost first
    made += _missing(out / STATE)
    lock = out / STATE / "lock"
    new_lock = not lock.exists()
    (out / STATE).mkdir(parents=True, exist_ok=True)
    f = _lock(lock)
    try:
        yield
    except BaseException:
        if new_lock:
            lock.unlink(missing_ok=True)  # while still held: see _lock
        for folder in made:  # rmdir removes only empty folders
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    finally:
        f.close()
