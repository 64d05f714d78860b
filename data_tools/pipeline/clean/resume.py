"""The clean stage's resume point: how much of ``sentences/corpus.jsonl.tmp`` is durable, and where in the inputs it
ends, in ``OUT/.prepare/clean.partial.json``.

The clean stage's output is a function of the sequence of input documents alone (each is cleaned on its own; dedupe
keeps a sentence's first occurrence), so a run that stops at a document boundary can be continued by another that
keeps the temp file's first ``bytes``, re-hashes their sentences into the dedupe arrays and reads on from the same
document. A record is written every ``CHECKPOINT_BYTES`` of output or ``CHECKPOINT_SECONDS``, after the temp file
is fsynced (a ``kill -9`` loses at most that much work), and when the stage stops on an exception (Ctrl-C, or a
file that fails mid-read: then at the start of that file, so a rerun after the file is fixed or removed keeps
everything before it). A record is used only when the options are the same and the new input list starts with the
files it covers, unchanged (path, size, mtime): the part already written is then what a fresh run writes first.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from data_tools.pipeline.clean.seen import SeenSentences, digests
from data_tools.pipeline.log import log
from data_tools.pipeline.shards import atomic_write_text
from data_tools.pipeline.state import CORPUS, STATE, HashingWriter

CHECKPOINT_BYTES = 32 << 20
CHECKPOINT_SECONDS = 30.0
REBUILD_LINES = 1 << 10  # lines of the kept part whose sentences the dedupe arrays take in one batch
STATS = ("read_documents", "documents", "sentences", "duplicates", "too_short", "too_long", "empty_documents")


def partial_path(out: Path) -> Path:
    return out / STATE / "clean.partial.json"


def drop_partial(out: Path) -> None:
    partial_path(out).unlink(missing_ok=True)


def file_ids(files: list[Path]) -> list[list]:
    return [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files]


class Resume:
    """Where a resumed run starts: ``files_done`` whole files, then ``skip`` documents of the next; the stats
    and dedupe arrays of the kept part; the writer, positioned at its end. ``fresh`` starts at the beginning."""

    def __init__(self, writer: HashingWriter, stats: dict, seen: SeenSentences, files_done: int = 0,
                 skip: int = 0):
        self.writer, self.stats, self.seen, self.files_done, self.skip = writer, stats, seen, files_done, skip

    @classmethod
    def fresh(cls, out: Path) -> Resume:
        drop_partial(out)
        return cls(HashingWriter(out / CORPUS), dict.fromkeys(STATS, 0), SeenSentences())


def _rebuild(tmp: Path, nbytes: int, dedupe: bool) -> tuple:
    """(sha256, dedupe arrays, documents) of ``tmp``'s first ``nbytes``."""
    sha, seen, docs, pos, batch = hashlib.sha256(), SeenSentences(), 0, 0, []
    with open(tmp, "rb") as f:
        while pos < nbytes:
            line = f.readline(nbytes - pos)
            if not line.endswith(b"\n"):
                raise ValueError("the kept part ends inside a line")
            pos += len(line)
            sha.update(line)
            docs += 1
            if dedupe:
                batch.append(digests(json.loads(line)))
                if len(batch) >= REBUILD_LINES:
                    seen.first_seen(b"".join(batch))
                    batch = []
    seen.first_seen(b"".join(batch))
    return sha, seen, docs


def resume_or_fresh(out: Path, options_key: str, files: list[Path], dedupe: bool) -> Resume:
    """The recorded resume point when it is sound for this run (same options, the files it covers still first
    and unchanged, the temp file's kept part as recorded), else a fresh start (the record and temp file dropped)."""
    try:
        rec = json.loads(partial_path(out).read_text())
        covered = rec["files"]
        sound = (rec["options"] == options_key and len(covered) <= len(files) and rec["files_done"] < len(files)
                 and file_ids(files[:len(covered)]) == covered)
    except (OSError, ValueError, KeyError, TypeError):
        return Resume.fresh(out)
    tmp = (out / CORPUS).with_name(CORPUS.name + ".tmp")
    why = None
    if not sound:
        why = "its options or input files changed"
    else:
        t0 = time.perf_counter()
        try:
            if tmp.stat().st_size < rec["bytes"]:
                raise ValueError("shorter than recorded")
            sha, seen, docs = _rebuild(tmp, rec["bytes"], dedupe)
            if sha.hexdigest() != rec["sha256"] or docs != rec["stats"]["documents"]:
                raise ValueError("its bytes differ from the record")
        except (OSError, ValueError) as e:
            why = f"{tmp} cannot be continued ({e})"
    if why is not None:
        log(f"clean: not resuming the interrupted run: {why}; starting over")
        return Resume.fresh(out)
    f = open(tmp, "r+b")
    f.truncate(rec["bytes"])
    f.seek(rec["bytes"])
    writer = HashingWriter.reopen(out / CORPUS, f, sha, rec["bytes"])
    n, skip = rec["files_done"], rec["skip"]
    where = f"at the start of {files[n]}" if not skip else f"after document {skip} of {files[n]}"
    log(f"clean: resuming an interrupted run from its last checkpoint: {rec['stats']['read_documents']} documents "
        f"({rec['bytes'] / 1e6:.1f} MB of {tmp.name}) kept, reading on {where} (file {n + 1} of {len(files)}; "
        f"kept part re-hashed in {time.perf_counter() - t0:.1f}s)")
    return Resume(writer, {k: rec["stats"][k] for k in STATS}, seen, n, skip)


class Checkpoints:
    """Writes resume records as the clean stage's main loop reaches document boundaries."""

    def __init__(self, out: Path, options_key: str, files: list[Path], writer: HashingWriter):
        self.out, self.options_key, self.files, self.writer = out, options_key, files, writer
        self.last_bytes, self.last_time = writer.bytes, time.monotonic()

    def due(self) -> bool:
        return (self.writer.bytes - self.last_bytes >= CHECKPOINT_BYTES
                or time.monotonic() - self.last_time >= CHECKPOINT_SECONDS)

    def record(self, point: dict) -> None:
        """Make ``point`` (bytes, sha256, files_done, skip, stats: a document boundary) the resume point: the
        temp file is fsynced before the record is replaced, so the record never names bytes that are not on disk."""
        self.writer.sync()
        n = point["files_done"] + (1 if point["skip"] else 0)
        rec = {"options": self.options_key, "files": file_ids(self.files[:n]), **point}
        atomic_write_text(partial_path(self.out), json.dumps(rec) + "\n")
        self.last_bytes, self.last_time = self.writer.bytes, time.monotonic()
