"""Stage (a), clean: read every input, normalise, split into sentences, filter by length and drop exact
duplicate sentences -> ``sentences/corpus.jsonl``. Documents are cleaned in chunks by worker processes and
written in input order, so the output does not depend on the number of workers."""
from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import pickle
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

from data_tools.errors import PrepareError
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
            for _ in read_documents(f, formats[f], doc_boundary, encoding):
                pass
        except PrepareError as e:
            problems.append(str(e))
    return problems, 0
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


def _init_clean(splitter, normalize: str, min_chars: int, max_chars: int) -> None:
    _CLEAN.update(splitter=load_splitter(splitter), normalize=normalize, min_chars=min_chars, max_chars=max_chars)


def _clean_chunk(docs: list[list[str]]) -> list[tuple[list[str], int, int]]:
    c = _CLEAN
    return [clean_document(d, c["splitter"], c["normalize"], c["min_chars"], c["max_chars"]) for d in docs]


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
    key = fingerprint({"stage": "clean", "v": STAGE_VERSION, "fmt": fmt, "doc_boundary": doc_boundary,
                       "normalize": normalize, "splitter": splitter_name(splitter), "min": min_chars,
                       "max": max_chars, "dedupe": dedupe, **({"encoding": encoding} if encoding != "utf-8" else {}),
                       "files": [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files]})
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

    def raw_docs() -> Iterator[list[str]]:
        for i, f in enumerate(files):
            try:
                yield from read_documents(f, formats[f], doc_boundary, encoding)
            except PrepareError as e:  # past its first bytes: the files after it may hold problems too
                problems, unchecked = _later_problems(files[i + 1:], formats, doc_boundary, encoding)
                raise PrepareError(_problems_line([str(e), *problems], len(files), unchecked)) from None

    drop_state(out, "clean")
    writer = HashingWriter(out / CORPUS)
    seen: set[bytes] = set()
    st = collections.Counter()
    bar = progress_bar(progress, desc="clean", unit="doc")
    try:
        with _ordered_pool(workers, _init_clean, (splitter, normalize, min_chars, max_chars)) as imap:
            for results in imap(_clean_chunk, _chunks(raw_docs())):
                for sentences, short, long in results:
                    st["read_documents"] += 1
                    st["too_short"] += short
                    st["too_long"] += long
                    kept = []
                    for s in sentences:
                        if dedupe:
                            h = hashlib.blake2b(s.encode(), digest_size=16).digest()
                            if h in seen:
                                st["duplicates"] += 1
                                continue
                            seen.add(h)
                        kept.append(s)
                    if kept:
                        writer.write((json.dumps(kept, ensure_ascii=False) + "\n").encode())
                        st["documents"] += 1
                        st["sentences"] += len(kept)
                    else:
                        st["empty_documents"] += 1
                bar.update(len(results))
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    if not st["read_documents"]:
        writer.abort()
        raise PrepareError(f"empty input: no text in {', '.join(map(str, files[:3]))}"
                           f"{f' and {len(files) - 3} more' if len(files) > 3 else ''}")
    if not st["documents"]:
        writer.abort()
        raise PrepareError(f"no sentences left after cleaning {st['read_documents']} documents "
                           f"({st['too_short']} shorter than --min-chars {min_chars}, {st['too_long']} longer "
                           f"than --max-chars {max_chars}, {st['duplicates']} duplicates)")
    output = writer.commit()
    stats = {k: st[k] for k in ("read_documents", "documents", "sentences", "duplicates", "too_short", "too_long",
                                "empty_documents")}
    stats["files"] = len(files)
    save_state(out, "clean", key, {str(CORPUS): output}, stats)
    log(f"clean: {stats['documents']} documents, {stats['sentences']} sentences; removed {stats['duplicates']} "
        f"duplicate sentences, {stats['too_short']} shorter than {min_chars} chars, {stats['too_long']} longer than "
        f"{max_chars or 'unlimited'} chars, {stats['empty_documents']} documents left empty")
    return {**stats, "seconds": time.perf_counter() - t0}
