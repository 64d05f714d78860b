"""Stage (a), clean: read every input, normalise, split into sentences, filter by length and drop exact
duplicate sentences -> ``sentences/corpus.jsonl``. Documents are cleaned in chunks by worker processes and
written in input order, so the output does not depend on the number of workers, and a stopped run resumes from its
last checkpoint (``resume``)."""
from __future__ import annotations

import collections
import contextlib
import itertools
import json
import multiprocessing as mp
import os
import pickle
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

from data_tools.errors import PrepareError
from data_tools.pipeline.clean.resume import (STATS, Checkpoints, Resume, drop_partial, file_ids, partial_path,
                                             resume_or_fresh)
from data_tools.pipeline.clean.seen import digests
from data_tools.pipeline.log import log, progress_bar
from data_tools.pipeline.options import DEFAULTS, PrepareOptions
from data_tools.pipeline.readers import (DOC_BOUNDARIES, FORMATS, check_encoding, detect_format, expand_inputs,
                                        head_problem, read_documents)
from data_tools.pipeline.state import (CORPUS, STAGE_VERSION, HashingWriter, drop_state, fingerprint, save_state,
                                       up_to_date)
from data_tools.pipeline.text import NORMALIZE_FORMS, clean_document, load_splitter, splitter_name
from data_tools.pipeline.workers import die_with_parent

_CHUNK_DOCS, _CHUNK_CHARS = 256, 1 << 20
SWEEP_SECONDS = 60.0  # after a file fails mid-read: how long the files after it are read for more problems
_LISTED = 5  # problems an error line names in full


def _problems_line(problems: list[str], files: int, unchecked: int = 0) -> str:
    """One error line for the input files that cannot be read: one file's own message, or how many and the
    first ``_LISTED`` of them, so that one run names every bad file (it named one a run)."""
    rest = ("" if not unchecked else
            f" ({unchecked} later file(s) not checked: the check stops after {SWEEP_SECONDS:.0f} s)")
    if len(problems) == 1:
        return problems[0] + rest
    more = f"; and {len(problems) - _LISTED} more" if len(problems) > _LISTED else ""
    return f"{len(problems)} of {files} input files cannot be read as text: " + "; ".join(problems[:_LISTED]) + \
        more + rest


def _later_problems(files: list[Path], formats: dict, doc_boundary: str, encoding: str) -> tuple[list[str], int]:
    """The files after one that failed mid-read, read whole (no cleaning) for their own first problem, for at most
    ``SWEEP_SECONDS``: (problems, files left unchecked)."""
    problems, deadline = [], time.monotonic() + SWEEP_SECONDS
    for i, f in enumerate(files):
        if time.monotonic() > deadline:
            return problems, len(files) - i
        try:
            collections.deque(read_documents(f, formats[f], doc_boundary, encoding), maxlen=0)  # to its end
        except PrepareError as e:
            problems.append(str(e))
    return problems, 0


def _keep_or_abort(out: Path, writer: HashingWriter) -> None:
    """A stopped run's temp corpus: kept while a resume record names part of it, else removed."""
    if partial_path(out).exists():
        writer.close()
    else:
        writer.abort()


def _init_worker(parent: int, initializer: Callable, initargs: tuple) -> None:
    die_with_parent(parent)
    initializer(*initargs)


@contextlib.contextmanager
def _ordered_pool(workers: int, initializer: Callable, initargs: tuple):
    """``imap(fn, items)`` yielding results in order with at most ``4 * workers`` tasks in flight (plain
    ``Pool.imap`` would read the whole input into its queue). ``workers <= 1`` runs in this process."""
    if workers <= 1:
        initializer(*initargs)
        yield map
        return
    with mp.get_context("spawn").Pool(workers, _init_worker, (os.getpid(), initializer, initargs)) as pool:
        def imap(fn, items: Iterable) -> Iterator:
            pending: collections.deque = collections.deque()
            for item in items:
                pending.append(pool.apply_async(fn, (item,)))
                if len(pending) >= 4 * workers:
                    yield pending.popleft().get()
            while pending:
                yield pending.popleft().get()
        yield imap


_CLEAN: dict = {}


def _init_clean(splitter, normalize: str, min_chars: int, max_chars: int, dedupe: bool) -> None:
    _CLEAN.update(splitter=load_splitter(splitter), normalize=normalize, min_chars=min_chars, max_chars=max_chars,
                  dedupe=dedupe)


def _clean_chunk(docs: list[list[str]]) -> tuple[list[tuple[list[bytes], int, int]], bytes]:
    """A chunk of documents cleaned, each as (its sentences JSON-encoded, too short, too long), and the digests of
    all their sentences (``b""`` without dedupe). The worker does every per-sentence step, so that the main
    process, which must take the chunks one at a time, only looks the digests up and joins what is kept."""
    c = _CLEAN
    docs = [clean_document(d, c["splitter"], c["normalize"], c["min_chars"], c["max_chars"]) for d in docs]
    encode = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(list) is these joined by ", "
    batch = digests(s for sentences, _, _ in docs for s in sentences) if c["dedupe"] else b""
    return [([encode(s).encode() for s in sentences], short, long) for sentences, short, long in docs], batch


def _chunks(docs: Iterable[list[str]]) -> Iterator[list[list[str]]]:
    chunk, chars = [], 0
    for doc in docs:
        chunk.append(doc)
        chars += sum(map(len, doc))
        if len(chunk) >= _CHUNK_DOCS or chars >= _CHUNK_CHARS:
            yield chunk
            chunk, chars = [], 0
    if chunk:
        yield chunk


class _Kept:
    """The corpus as the main loop writes it, in input order: dedupe, the stats, and where in the inputs it stands
    (``cur``, the file of the last document taken, and ``in_file``, how many of its documents), from which
    ``here`` makes a resume point at any document boundary."""

    def __init__(self, resume: Resume, dedupe: bool):
        self.resume, self.writer, self.seen, self.dedupe = resume, resume.writer, resume.seen, dedupe
        self.st = collections.Counter(resume.stats)
        self.cur, self.in_file = resume.files_done, resume.skip
        self.point = self.here(self.cur, self.in_file) if self.writer.bytes else None  # what a Ctrl-C keeps
        self.entered = self.here(self.cur, 0) if not self.in_file else None  # file ``cur``'s start: a failure's

    def here(self, files_done: int, skip: int) -> dict:
        return {"bytes": self.writer.bytes, "sha256": self.writer.sha.hexdigest(), "files_done": files_done,
                "skip": skip, "stats": {k: self.st[k] for k in STATS}}

    def take(self, docs: list[tuple[int, list[bytes], int, int]], batch: bytes) -> None:
        """A chunk's cleaned documents, in input order: (file index, JSON-encoded sentences, too short, too long)
        each, and the digests of their sentences, checked against the kept ones together
        (``SeenSentences.first_seen``). Their lines are written together, and before a new file's start is taken."""
        new = self.seen.first_seen(batch).tolist() if self.dedupe else None
        lines: list[bytes] = []
        at, st = 0, self.st
        for file_index, sentences, short, long in docs:
            if file_index != self.cur:
                self._write(lines)
                self.cur, self.in_file, self.entered = file_index, 0, self.here(file_index, 0)
            self.in_file += 1
            kept = sentences if new is None else list(itertools.compress(sentences, new[at:at + len(sentences)]))
            at += len(sentences)
            st["read_documents"] += 1
            st["too_short"] += short
            st["too_long"] += long
            st["duplicates"] += len(sentences) - len(kept)
            if kept:
                lines.append(b"[" + b", ".join(kept) + b"]\n")
                st["documents"] += 1
                st["sentences"] += len(kept)
            else:
                st["empty_documents"] += 1
        self._write(lines)

    def _write(self, lines: list[bytes]) -> None:
        if lines:
            self.writer.write(b"".join(lines))
            lines.clear()


def clean(inputs: list[Path | str], out: Path, opts: PrepareOptions = DEFAULTS, *, workers: int = 1,
          force: bool = False, progress: bool | None = None) -> dict:
    """Stage (a): read every input, normalise, split into sentences, filter by length and drop exact
    duplicate sentences (corpus-wide, first occurrence wins) -> ``sentences/corpus.jsonl``. ``opts.splitter``
    may also be a callable (str -> list[str])."""
    fmt, doc_boundary, normalize, splitter = opts.fmt, opts.doc_boundary, opts.normalize, opts.splitter
    min_chars, max_chars, dedupe = opts.min_chars, opts.max_chars, opts.dedupe
    t0 = time.perf_counter()
    out = Path(out)
    if fmt not in FORMATS:
        raise PrepareError(f"unknown format '{fmt}' (valid: {', '.join(FORMATS)})")
    if doc_boundary not in DOC_BOUNDARIES:
        raise PrepareError(f"unknown doc boundary '{doc_boundary}' (valid: {', '.join(DOC_BOUNDARIES)})")
    if normalize not in NORMALIZE_FORMS:
        raise PrepareError(f"unknown normalization '{normalize}' (valid: {', '.join(NORMALIZE_FORMS)})")
    if min_chars < 0 or max_chars < 0 or max_chars and max_chars < min_chars:
        raise PrepareError(f"bad length filter: --min-chars {min_chars} --max-chars {max_chars}")
    encoding = check_encoding(opts.encoding)
    files = expand_inputs(inputs, exclude=out, log=lambda line: log(f"clean: {line}"))
    settings = {"stage": "clean", "v": STAGE_VERSION, "fmt": fmt, "doc_boundary": doc_boundary,
                "normalize": normalize, "splitter": splitter_name(splitter), "min": min_chars, "max": max_chars,
                "dedupe": dedupe, **({"encoding": encoding} if encoding != "utf-8" else {})}
    key = fingerprint({**settings, "files": file_ids(files)})
    options_key = fingerprint(settings)  # a resume record's: its files are checked one by one
    if not force and (state := up_to_date(out, "clean", key)):
        log(f"clean: up to date ({state['stats']['documents']} documents), skipped")
        return {**state["stats"], "seconds": time.perf_counter() - t0, "skipped": True}
    load_splitter(splitter)  # fail early, in this process, on a bad --splitter
    if callable(splitter) and workers > 1:
        try:
            pickle.dumps(splitter)
        except (pickle.PicklingError, AttributeError, TypeError):
            log("clean: the splitter cannot be sent to worker processes; cleaning in this process")
            workers = 1
    problems = [p for f in files if (p := head_problem(f, encoding)) is not None]  # every bad file, not the first
    if problems:
        raise PrepareError(_problems_line(problems, len(files)))
    formats = {f: (detect_format(f, encoding) if fmt == "auto" else fmt) for f in files}
    log(f"clean: {len(files)} file(s) (" + ", ".join(f"{k}: {v}" for k, v in
                                                     sorted(collections.Counter(formats.values()).items())) + ")")

    origins: collections.deque = collections.deque()  # the file index of each document read, in order
    failed: dict = {}  # a file that failed mid-read: its index and the error that names it and the files after it

    def raw_docs() -> Iterator[list[str]]:
        for i in range(r.files_done, len(files)):
            f = files[i]
            try:
                docs = read_documents(f, formats[f], doc_boundary, encoding)
                for doc in itertools.islice(docs, r.skip, None) if i == r.files_done else docs:
                    origins.append(i)
                    yield doc
            except PrepareError as e:  # past its first bytes: the files after it may hold problems too
                problems, unchecked = _later_problems(files[i + 1:], formats, doc_boundary, encoding)
                failed.update(index=i, error=PrepareError(_problems_line([str(e), *problems], len(files), unchecked)))
                return  # the documents before it are still cleaned and kept for a rerun

    if force:
        drop_partial(out)
    drop_state(out, "clean")
    kept = _Kept(resume_or_fresh(out, options_key, files, dedupe), dedupe)
    r, writer, st = kept.resume, kept.writer, kept.st
    ckpt = Checkpoints(out, options_key, files, writer)
    bar = progress_bar(progress, desc="clean", unit="doc")
    try:
        with _ordered_pool(workers, _init_clean, (splitter, normalize, min_chars, max_chars, dedupe)) as imap:
            for results, batch in imap(_clean_chunk, _chunks(raw_docs())):
                kept.take([(origins.popleft(), *result) for result in results], batch)
                kept.point = kept.here(kept.cur, kept.in_file)
                if ckpt.due():
                    ckpt.record(kept.point)
                bar.update(len(results))
    except BaseException:
        with contextlib.suppress(Exception):
            if kept.point is not None and kept.point["bytes"]:
                ckpt.record(kept.point)
        _keep_or_abort(out, writer)
        raise
    finally:
        bar.close()
    if failed:  # keep what the files before the failed one gave: a rerun without it (or with it fixed) goes on
        keep = kept.entered if kept.cur == failed["index"] else kept.here(failed["index"], 0)
        if keep is not None and keep["bytes"]:
            ckpt.record(keep)
        elif keep is not None:  # it failed in the first file: nothing before it to keep
            drop_partial(out)
        _keep_or_abort(out, writer)
        raise failed["error"]
    if not st["read_documents"]:
        writer.abort()
        drop_partial(out)
        raise PrepareError(f"empty input: no text in {', '.join(map(str, files[:3]))}"
                           f"{f' and {len(files) - 3} more' if len(files) > 3 else ''}")
    if not st["documents"]:
        writer.abort()
        drop_partial(out)
        raise PrepareError(f"no sentences left after cleaning {st['read_documents']} documents "
                           f"({st['too_short']} shorter than --min-chars {min_chars}, {st['too_long']} longer "
                           f"than --max-chars {max_chars}, {st['duplicates']} duplicates)")
    output = writer.commit()
    stats = {k: st[k] for k in STATS}
    stats["files"] = len(files)
    drop_partial(out)
    save_state(out, "clean", key, {str(CORPUS): output}, stats)
    log(f"clean: {stats['documents']} documents, {stats['sentences']} sentences; removed {stats['duplicates']} "
        f"duplicate sentences, {stats['too_short']} shorter than {min_chars} chars, {stats['too_long']} longer than "
        f"{max_chars or 'unlimited'} chars, {stats['empty_documents']} documents left empty")
    return {**stats, "seconds": time.perf_counter() - t0}
