"""Corpus preparation: raw text -> clean sentences -> document splits -> SentencePiece -> WebDataset shards.

    python -m data_tools.prepare --input FILE_OR_DIR... --out DIR [options]      every stage (= `all`)
    python -m data_tools.prepare clean    --input ... --out DIR                  read, normalise, split, dedupe
    python -m data_tools.prepare split    --out DIR [--valid --test --seed]      split by document
    python -m data_tools.prepare spm      --out DIR [--vocab-size ...]           train SentencePiece on train
    python -m data_tools.prepare tokenize --out DIR [--workers --shard-tokens]   shards + manifest.json

Layout of DIR: ``sentences/corpus.jsonl`` (clean) and ``sentences/{train,valid,test}.jsonl`` (split), one
document per line as a JSON list of sentences; ``spm.model``/``spm.vocab``; ``{split}-NNNNNN.tar`` shards and
``manifest.json`` (docs/shard_format.md); ``.prepare/`` holds each stage's completion record. A stage whose
inputs and options are unchanged since its last complete run is skipped (``--force`` redoes it), and the
tokenize stage resumes shard by shard, so re-running the same command after a crash finishes the job.
Errors are one ``error:`` line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import pickle
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from data_tools.errors import PrepareError
from data_tools.readers import DOC_BOUNDARIES, FORMATS, detect_format, expand_inputs, read_documents
from data_tools.shards import (RECORDS, ShardTask, atomic_write_text, completed, forget, plan_split, write_manifest,
                               write_shard_task)
from data_tools.spm_train import DEFAULT_THREADS, LAYOUTS, MODEL_TYPES, train_spm_from_sentences, write_vocab
from data_tools.text import NORMALIZE_FORMS, clean_document, load_splitter, splitter_name

SPLITS = ("train", "valid", "test")
STAGES = ("clean", "split", "spm", "tokenize")
STATE = Path(".prepare")
CORPUS = Path("sentences") / "corpus.jsonl"
STAGE_VERSION = 1  # bump when a stage's output for the same inputs changes
_CHUNK_DOCS, _CHUNK_CHARS = 256, 1 << 20

_quiet = False


def log(msg: str) -> None:
    if not _quiet:
        print(f"prepare: {msg}", file=sys.stderr, flush=True)


def _progress(progress: bool | None, **kw):
    from tqdm import tqdm
    return tqdm(file=sys.stderr, disable=(None if progress is None else not progress) if not _quiet else True,
                mininterval=0.5, dynamic_ncols=True, **kw)


def split_path(out: Path, split: str) -> Path:
    return out / "sentences" / f"{split}.jsonl"


# --------------------------------------------------------------------------------------------- stage records
def _fingerprint(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _load_state(out: Path, stage: str) -> dict | None:
    try:
        return json.loads((out / STATE / f"{stage}.json").read_text())
    except (OSError, ValueError):
        return None


def _up_to_date(out: Path, stage: str, key: str) -> dict | None:
    """The stage's record if it was completed with ``key`` and its outputs still have their recorded sizes."""
    state = _load_state(out, stage)
    if not state or state.get("key") != key:
        return None
    for rel, meta in state.get("outputs", {}).items():
        try:
            if (out / rel).stat().st_size != meta["bytes"]:
                return None
        except OSError:
            return None
    return state


def _save_state(out: Path, stage: str, key: str, outputs: dict[str, dict], stats: dict) -> dict:
    state = {"key": key, "outputs": outputs, "stats": stats}
    atomic_write_text(out / STATE / f"{stage}.json", json.dumps(state, indent=1, ensure_ascii=False) + "\n")
    return state


def _drop_state(out: Path, *stages: str) -> None:
    for stage in stages:
        (out / STATE / f"{stage}.json").unlink(missing_ok=True)


class _HashingWriter:
    """Binary file written to ``path.tmp`` and renamed on ``commit``; tracks sha256 and size."""

    def __init__(self, path: Path):
        self.path, self.tmp = path, path.with_name(path.name + ".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.tmp, "wb")
        self.sha, self.bytes = hashlib.sha256(), 0

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.sha.update(data)
        self.bytes += len(data)

    def commit(self) -> dict:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.path)
        return {"bytes": self.bytes, "sha256": self.sha.hexdigest()}

    def abort(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)


def _file_signature(path: Path) -> dict:
    """sha256, size, lines and sentences of a jsonl document file (for files this tool did not record)."""
    sha, size, docs, sents = hashlib.sha256(), 0, 0, 0
    with open(path, "rb") as f:
        for line in f:
            sha.update(line)
            size += len(line)
            docs += 1
            sents += len(json.loads(line))
    return {"bytes": size, "sha256": sha.hexdigest(), "documents": docs, "sentences": sents}


@contextlib.contextmanager
def _exclusive(out: Path):
    """Hold ``OUT/.prepare/lock`` so two runs never write the same directory at once."""
    import fcntl
    (out / STATE).mkdir(parents=True, exist_ok=True)
    with open(out / STATE / "lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PrepareError(f"another data_tools.prepare is working in {out}") from None
        yield


# --------------------------------------------------------------------------------------------- worker pools
@contextlib.contextmanager
def _ordered_pool(workers: int, initializer: Callable, initargs: tuple):
    """``imap(fn, items)`` yielding results in order with at most ``4 * workers`` tasks in flight (plain
    ``Pool.imap`` would read the whole input into its queue). ``workers <= 1`` runs in this process."""
    if workers <= 1:
        initializer(*initargs)
        yield map
        return
    with mp.get_context("spawn").Pool(workers, initializer, initargs) as pool:
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


# --------------------------------------------------------------------------------------------- stages
def clean(inputs: list[Path | str], out: Path, *, fmt: str = "auto", doc_boundary: str = "blank",
          normalize: str = "NFKC", splitter="default", min_chars: int = 2, max_chars: int = 2000,
          dedupe: bool = True, workers: int = 1, force: bool = False, progress: bool | None = None) -> dict:
    """Stage (a): read every input, normalise, split into sentences, filter by length and drop exact
    duplicate sentences (corpus-wide, first occurrence wins) -> ``sentences/corpus.jsonl``."""
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
    files = expand_inputs(inputs)
    key = _fingerprint({"stage": "clean", "v": STAGE_VERSION, "fmt": fmt, "doc_boundary": doc_boundary,
                        "normalize": normalize, "splitter": splitter_name(splitter), "min": min_chars,
                        "max": max_chars, "dedupe": dedupe,
                        "files": [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files]})
    if not force and (state := _up_to_date(out, "clean", key)):
        log(f"clean: up to date ({state['stats']['documents']} documents), skipped")
        return {**state["stats"], "seconds": time.perf_counter() - t0, "skipped": True}
    load_splitter(splitter)  # fail early, in this process, on a bad --splitter
    if callable(splitter) and workers > 1:
        try:
            pickle.dumps(splitter)
        except (pickle.PicklingError, AttributeError, TypeError):
            log("clean: the splitter cannot be sent to worker processes; cleaning in this process")
            workers = 1
    formats = {f: (detect_format(f) if fmt == "auto" else fmt) for f in files}
    log(f"clean: {len(files)} file(s) (" + ", ".join(f"{k}: {v}" for k, v in
                                                     sorted(collections.Counter(formats.values()).items())) + ")")

    def raw_docs() -> Iterator[list[str]]:
        for f in files:
            yield from read_documents(f, formats[f], doc_boundary)

    _drop_state(out, "clean")
    writer = _HashingWriter(out / CORPUS)
    seen: set[bytes] = set()
    st = collections.Counter()
    bar = _progress(progress, desc="clean", unit="doc")
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
    _save_state(out, "clean", key, {str(CORPUS): output}, stats)
    log(f"clean: {stats['documents']} documents, {stats['sentences']} sentences; removed {stats['duplicates']} "
        f"duplicate sentences, {stats['too_short']} shorter than {min_chars} chars, {stats['too_long']} longer than "
        f"{max_chars or 'unlimited'} chars, {stats['empty_documents']} documents left empty")
    return {**stats, "seconds": time.perf_counter() - t0}


def parse_size(text: str) -> int | float:
    """``--valid``/``--test``: a whole number is a count of documents, a decimal in [0, 1) a fraction."""
    if re.fullmatch(r"\d+", text.strip()):
        return int(text)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is neither a document count nor a fraction") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"'{text}': a fraction must be in [0, 1) (or give a whole number of "
                                         "documents)")
    return value


def _count(size: int | float, n: int, flag: str) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size < 0:
        raise PrepareError(f"{flag} {size!r}: expected a document count or a fraction in [0, 1)")
    if isinstance(size, int):
        return size
    if size >= 1:
        raise PrepareError(f"{flag} {size}: a fraction must be < 1 (or give a whole number of documents)")
    return max(1, round(size * n)) if size > 0 else 0


def split(out: Path, valid: int | float = 0.05, test: int | float = 0.05, seed: int = 0, force: bool = False) -> dict:
    """Stage (b): assign whole documents to train/valid/test (a seeded permutation; each split keeps corpus
    order) -> ``sentences/{train,valid,test}.jsonl``."""
    t0 = time.perf_counter()
    out = Path(out)
    corpus = out / CORPUS
    if not corpus.is_file():
        raise PrepareError(f"{corpus} not found: run the clean stage first")
    recorded = _load_state(out, "clean")
    state = _up_to_date(out, "clean", recorded["key"]) if recorded else None
    if state:
        sig = {**state["outputs"][str(CORPUS)], "documents": state["stats"]["documents"]}
    else:
        sig = _file_signature(corpus)
    n = sig["documents"]
    n_valid, n_test = _count(valid, n, "--valid"), _count(test, n, "--test")
    if n_valid + n_test >= n:
        raise PrepareError(f"too few documents: {n} documents cannot give {n_valid} valid + {n_test} test + at "
                           "least 1 train (lower --valid/--test, or add text)")
    key = _fingerprint({"stage": "split", "v": STAGE_VERSION, "corpus": sig["sha256"], "valid": n_valid,
                        "test": n_test, "seed": seed})
    if not force and (state := _up_to_date(out, "split", key)):
        log("split: up to date (" + ", ".join(f"{s} {v['documents']}" for s, v in state["stats"].items()) +
            " documents), skipped")
        return {**state["stats"], "seconds": time.perf_counter() - t0, "skipped": True}
    _drop_state(out, "split")
    order = np.random.default_rng(seed).permutation(n)
    assign = np.zeros(n, np.int8)
    assign[order[:n_valid]] = 1
    assign[order[n_valid:n_valid + n_test]] = 2
    writers = [_HashingWriter(split_path(out, s)) for s in SPLITS]
    counts = {s: collections.Counter() for s in SPLITS}
    try:
        with open(corpus, "rb") as f:
            for i, line in enumerate(f):
                if i >= n:
                    raise PrepareError(f"{corpus} changed since it was recorded; re-run the clean stage")
                s = int(assign[i])
                writers[s].write(line)
                counts[SPLITS[s]]["documents"] += 1
                counts[SPLITS[s]]["sentences"] += len(json.loads(line))
    except BaseException:
        for w in writers:
            w.abort()
        raise
    outputs = {str(split_path(out, s).relative_to(out)): w.commit() for s, w in zip(SPLITS, writers)}
    stats = {s: {"documents": counts[s]["documents"], "sentences": counts[s]["sentences"]} for s in SPLITS}
    _save_state(out, "split", key, outputs, stats)
    log("split: " + ", ".join(f"{s} {v['documents']} documents / {v['sentences']} sentences"
                              for s, v in stats.items()) + f" (seed {seed})")
    return {**stats, "seconds": time.perf_counter() - t0}


def _split_signature(out: Path, split_name: str) -> dict:
    state = _load_state(out, "split")
    rel = str(split_path(out, split_name).relative_to(out))
    if state and _up_to_date(out, "split", state["key"]) and rel in state["outputs"]:
        return {**state["outputs"][rel], **state["stats"][split_name]}
    path = split_path(out, split_name)
    if not path.is_file():
        raise PrepareError(f"{path} not found: run the split stage first")
    return _file_signature(path)


def train_tokenizer(out: Path, vocab_size: int = 50_000, family: str = "roberta", model_type: str = "unigram",
                    input_sentences: int = 2_000_000, character_coverage: float = 0.9995, seed: int = 0,
                    threads: int = DEFAULT_THREADS, tokenizer: Path | str | None = None, force: bool = False) -> dict:
    """Stage (c): SentencePiece on the train split (a seeded sample of ``input_sentences`` sentences when it
    has more) -> ``spm.model``/``spm.vocab``; or, with ``tokenizer``, copy an existing model instead."""
    t0 = time.perf_counter()
    out = Path(out)
    if family not in LAYOUTS:
        raise PrepareError(f"unknown family '{family}' (valid: {', '.join(LAYOUTS)})")
    model, vocab = out / "spm.model", out / "spm.vocab"
    if tokenizer is not None:
        tokenizer = Path(tokenizer)
        if not tokenizer.is_file():
            raise PrepareError(f"tokenizer not found: {tokenizer}")
        key = _fingerprint({"stage": "spm", "copy": hashlib.sha256(tokenizer.read_bytes()).hexdigest()})
    else:
        if vocab_size < 8:
            raise PrepareError(f"--vocab-size {vocab_size} is too small")
        train = _split_signature(out, "train")
        key = _fingerprint({"stage": "spm", "v": STAGE_VERSION, "train": train["sha256"], "vocab": vocab_size,
                            "family": family, "type": model_type, "sample": input_sentences,
                            "coverage": character_coverage, "seed": seed, "threads": threads})
    if not force and (state := _up_to_date(out, "spm", key)):
        log(f"spm: up to date (vocab {state['stats']['vocab_size']}), skipped")
        return {**state["stats"], "seconds": time.perf_counter() - t0, "skipped": True}
    _drop_state(out, "spm")
    import sentencepiece as spm
    if tokenizer is not None:
        shutil.copyfile(tokenizer, model.with_name(model.name + ".tmp"))
        os.replace(model.with_name(model.name + ".tmp"), model)
        if tokenizer.with_suffix(".vocab").is_file():
            shutil.copyfile(tokenizer.with_suffix(".vocab"), vocab)
        else:
            write_vocab(model.read_bytes(), vocab)
        log(f"spm: copied {tokenizer}")
        sampled = None
    else:
        if train["sentences"] == 0:
            raise PrepareError("the train split has no sentences")
        picks = None
        if train["sentences"] > input_sentences > 0:
            picks = np.sort(np.random.default_rng(seed).choice(train["sentences"], input_sentences, replace=False))
        sampled = train["sentences"] if picks is None else len(picks)

        def sample() -> Iterator[str]:
            i = j = 0
            with open(split_path(out, "train"), "rb") as f:
                for line in f:
                    for s in json.loads(line):
                        if picks is None or (j < len(picks) and picks[j] == i):
                            yield s
                            j += 1
                        i += 1

        log(f"spm: training {model_type} vocab {vocab_size} ({family} layout) on {sampled} of "
            f"{train['sentences']} train sentences")
        trained = train_spm_from_sentences(sample(), out / STATE / "spm" / "spm", vocab_size, family, model_type,
                                           seed=seed, num_threads=threads, character_coverage=character_coverage)
        os.replace(trained.with_suffix(".vocab"), vocab)
        os.replace(trained, model)
    sp = spm.SentencePieceProcessor(model_file=str(model))
    stats = {"vocab_size": sp.get_piece_size(), "sampled_sentences": sampled,
             "sha256": hashlib.sha256(model.read_bytes()).hexdigest()}
    _save_state(out, "spm", key, {"spm.model": {"bytes": model.stat().st_size}}, stats)
    return {**stats, "seconds": time.perf_counter() - t0}


def _run_shards(tasks: list[ShardTask], workers: int, bar) -> Iterator[dict]:
    if workers <= 1 or len(tasks) <= 1:
        for t in tasks:
            rec = write_shard_task(t)
            bar.update(t.n_docs)
            yield rec
        return
    with mp.get_context("spawn").Pool(min(workers, len(tasks))) as pool:
        for rec in pool.imap_unordered(write_shard_task, tasks):
            bar.update(rec["documents"])
            yield rec


def tokenize(out: Path, workers: int = 1, shard_tokens: int | None = 50_000_000, shard_docs: int | None = None,
             force: bool = False, progress: bool | None = None) -> dict:
    """Stage (d): tokenize every split into shards (resuming complete ones) and write manifest.json."""
    t0 = time.perf_counter()
    out = Path(out)
    model = out / "spm.model"
    if not model.is_file():
        raise PrepareError(f"{model} not found: run the spm stage first")
    if shard_docs is not None and shard_docs < 1 or shard_docs is None and (shard_tokens is None or shard_tokens < 1):
        raise PrepareError("--shard-docs / --shard-tokens must be at least 1")
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(model))
    vocab_size = sp.get_piece_size()
    tok_sha = hashlib.sha256(model.read_bytes()).hexdigest()
    plans: dict[str, list[ShardTask]] = {}
    for s in SPLITS:
        src = split_path(out, s)
        if not src.is_file():
            raise PrepareError(f"{src} not found: run the split stage first")
        plans[s], _ = plan_split(out, s, src, model, tok_sha, vocab_size, sp, shard_tokens, shard_docs)
    tasks = [t for s in SPLITS for t in plans[s]]
    planned = {t.name for t in tasks}
    # Shards (and temp files) of an earlier plan that this one does not produce would confuse a glob reader.
    # Temp files are from killed runs (runs through the CLI or run_pipeline hold the directory's lock).
    for f in sorted(out.iterdir()):
        m = re.fullmatch(rf"((?:{'|'.join(SPLITS)})-\d{{6}}\.tar)(\.tmp\d*)?", f.name)
        if m and (m.group(2) or m.group(1) not in planned):
            f.unlink()
            if not m.group(2):
                (out / RECORDS / f"{f.name}.json").unlink(missing_ok=True)
                log(f"tokenize: removed {f.name} (not part of this plan)")
    if force:
        for t in tasks:
            forget(t)
    records = {t.name: rec for t in tasks if (rec := completed(t))}
    todo = [t for t in tasks if t.name not in records]
    if records:
        log(f"tokenize: {len(records)} of {len(tasks)} shards already complete, skipped")
    if todo:
        (out / "manifest.json").unlink(missing_ok=True)  # never leave a manifest describing other shards
        log(f"tokenize: writing {len(todo)} shard(s) with {min(workers, len(todo))} worker(s)")
        t1 = time.perf_counter()
        bar = _progress(progress, desc="tokenize", unit="doc", total=sum(t.n_docs for t in todo))
        try:
            for rec in _run_shards(todo, workers, bar):
                records[rec["shard"]] = rec
        finally:
            bar.close()
        written = sum(records[t.name]["sentences"] for t in todo)
        dt = time.perf_counter() - t1
        log(f"tokenize: {written} sentences in {dt:.1f}s ({written / max(dt, 1e-9):,.0f} sentences/s)")
    summary = {}
    for s in SPLITS:
        recs = [records[t.name] for t in plans[s]]
        summary[s] = {"shards": [t.name for t in plans[s]],
                      **{k: sum(r[k] for r in recs) for k in ("documents", "sentences", "tokens")}}
    extra = {"dtype": np.dtype(plans["train"][0].dtype if plans["train"] else
                               ("uint16" if vocab_size <= 65536 else "uint32")).name}
    info = {st: s["stats"] for st in ("clean", "split") if (s := _load_state(out, st))}
    if info:
        extra["prepare"] = info
    manifest = write_manifest(out, model, vocab_size, summary, **extra)
    log("tokenize: " + ", ".join(f"{s} {v['documents']} docs / {v['sentences']} sentences / {v['tokens']} tokens "
                                 f"in {len(v['shards'])} shard(s)" for s, v in summary.items()))
    return {"manifest": str(manifest), "splits": summary, "written_shards": len(todo),
            "written_sentences": sum(records[t.name]["sentences"] for t in todo),
            "seconds": time.perf_counter() - t0}


# --------------------------------------------------------------------------------------------- everything
def run_pipeline(inputs: list[Path | str], out: Path, vocab_size: int = 50_000, family: str = "roberta",
                 valid: int | float = 0.05, test: int | float = 0.05, seed: int = 0, min_chars: int = 2,
                 shard_tokens: int | None = 50_000_000, doc_boundary: str = "blank", *, fmt: str = "auto",
                 normalize: str = "NFKC", splitter="default", max_chars: int = 2000, dedupe: bool = True,
                 model_type: str = "unigram", spm_input_sentences: int = 2_000_000,
                 character_coverage: float = 0.9995, spm_threads: int = DEFAULT_THREADS,
                 tokenizer: Path | str | None = None, shard_docs: int | None = None, workers: int = 1,
                 force: bool = False, progress: bool | None = None) -> dict:
    """Every stage; returns each stage's stats (with ``seconds``) and the manifest path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with _exclusive(out):
        return _run_all(inputs, out, vocab_size, family, valid, test, seed, min_chars, shard_tokens, doc_boundary,
                        fmt, normalize, splitter, max_chars, dedupe, model_type, spm_input_sentences,
                        character_coverage, spm_threads, tokenizer, shard_docs, workers, force, progress)


def _run_all(inputs, out, vocab_size, family, valid, test, seed, min_chars, shard_tokens, doc_boundary, fmt,
             normalize, splitter, max_chars, dedupe, model_type, spm_input_sentences, character_coverage,
             spm_threads, tokenizer, shard_docs, workers, force, progress) -> dict:
    t0 = time.perf_counter()
    stats = {"clean": clean(inputs, out, fmt=fmt, doc_boundary=doc_boundary, normalize=normalize, splitter=splitter,
                            min_chars=min_chars, max_chars=max_chars, dedupe=dedupe, workers=workers, force=force,
                            progress=progress)}
    stats["split"] = split(out, valid, test, seed, force=force)
    stats["spm"] = train_tokenizer(out, vocab_size, family, model_type, spm_input_sentences, character_coverage, seed,
                                   spm_threads, tokenizer, force=force)
    stats["tokenize"] = tokenize(out, workers, shard_tokens, shard_docs, force=force, progress=progress)
    stats["manifest"] = stats["tokenize"]["manifest"]
    stats["seconds"] = time.perf_counter() - t0
    return stats


def prepare(inputs: list[Path | str], out: Path, vocab_size: int = 50_000, family: str = "roberta",
            valid: int | float = 0.05, test: int | float = 0.05, seed: int = 0, min_chars: int = 2,
            shard_tokens: int | None = 50_000_000, doc_boundary: str = "blank", **kw) -> Path:
    """Every stage; returns the manifest path. Keyword options as ``run_pipeline``."""
    return Path(run_pipeline(inputs, out, vocab_size, family, valid, test, seed, min_chars, shard_tokens,
                             doc_boundary, **kw)["manifest"])


# --------------------------------------------------------------------------------------------- CLI
def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return value


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--force", action="store_true", help="redo the stage(s) even if up to date")
    p.add_argument("--quiet", action="store_true", help="no progress bars or log lines (errors still print)")


def _add_workers(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=_positive, default=os.cpu_count() or 1,
                   help="worker processes for cleaning and tokenization (default: all cores; the output does not "
                        "depend on it)")


def _add_clean(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("reading and cleaning")
    g.add_argument("--input", nargs="+", required=True, type=Path,
                   help="files (gzip/bzip2/xz allowed) or directories (every file below, sorted)")
    g.add_argument("--format", dest="fmt", default="auto", choices=FORMATS,
                   help="input format; auto detects it per file (default)")
    g.add_argument("--doc-boundary", default="blank", choices=DOC_BOUNDARIES,
                   help="text format: a blank line ends a document (default), or each file is one document")
    g.add_argument("--normalize", default="NFKC", choices=NORMALIZE_FORMS, help="Unicode normalisation")
    g.add_argument("--splitter", default="default",
                   help="sentence splitter: 'default', 'none' (a line is a sentence) or MODULE:FUNCTION (str -> "
                        "list[str])")
    g.add_argument("--min-chars", type=int, default=2, help="drop sentences shorter than this")
    g.add_argument("--max-chars", type=int, default=2000, help="drop sentences longer than this (0: no limit)")
    g.add_argument("--no-dedupe", dest="dedupe", action="store_false",
                   help="keep exact duplicate sentences (default: drop all but the first)")


def _add_split(p: argparse.ArgumentParser, seed: bool = True) -> None:
    g = p.add_argument_group("splitting by document")
    g.add_argument("--valid", type=parse_size, default=0.05,
                   help="validation documents: a fraction (0.05) or a count (1000); default 0.05")
    g.add_argument("--test", type=parse_size, default=0.05, help="test documents, like --valid; default 0.05")
    if seed:
        g.add_argument("--seed", type=int, default=0, help="split (and SentencePiece sampling) seed")


def _add_spm(p: argparse.ArgumentParser, seed: bool = True) -> None:
    g = p.add_argument_group("SentencePiece")
    g.add_argument("--vocab-size", type=_positive, default=50_000)
    g.add_argument("--family", default="roberta", choices=sorted(LAYOUTS), help="special-token layout")
    g.add_argument("--model-type", default="unigram", choices=MODEL_TYPES)
    g.add_argument("--spm-input-sentences", type=int, default=2_000_000,
                   help="train on a seeded sample of this many train sentences (0: all)")
    g.add_argument("--character-coverage", type=float, default=0.9995)
    g.add_argument("--spm-threads", type=_positive, default=DEFAULT_THREADS,
                   help="SentencePiece trainer threads (the model depends on it; fixed default for reproducibility)")
    g.add_argument("--tokenizer", type=Path, help="use this SentencePiece model instead of training one")
    if seed:
        g.add_argument("--seed", type=int, default=0, help="sampling seed")


def _add_tokenize(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("shards")
    m = g.add_mutually_exclusive_group()
    m.add_argument("--shard-tokens", type=_positive, default=50_000_000,
                   help="target tokens per shard (whole documents; default 50M)")
    m.add_argument("--shard-docs", type=_positive, help="documents per shard (instead of --shard-tokens)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m data_tools.prepare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="stage", metavar="{all,clean,split,spm,tokenize}")
    for name, help_, adders in [
        ("all", "every stage (the default when no stage is named)",
         [_add_common, _add_workers, _add_clean, _add_split, lambda q: _add_spm(q, seed=False), _add_tokenize]),
        ("clean", "read, normalise, sentence-split, filter, dedupe -> sentences/corpus.jsonl",
         [_add_common, _add_workers, _add_clean]),
        ("split", "split documents -> sentences/{train,valid,test}.jsonl", [_add_common, _add_split]),
        ("spm", "train SentencePiece on the train split -> spm.model", [_add_common, _add_spm]),
        ("tokenize", "tokenize into shards + manifest.json (resumes)", [_add_common, _add_workers, _add_tokenize]),
    ]:
        q = sub.add_parser(name, help=help_, description=help_)
        for add in adders:
            add(q)
    return p


def _run_stage(a: argparse.Namespace, progress: bool | None) -> None:
    if a.stage == "all":
        stats = run_pipeline(a.input, a.out, a.vocab_size, a.family, a.valid, a.test, a.seed, a.min_chars,
                             a.shard_tokens, a.doc_boundary, fmt=a.fmt, normalize=a.normalize, splitter=a.splitter,
                             max_chars=a.max_chars, dedupe=a.dedupe, model_type=a.model_type,
                             spm_input_sentences=a.spm_input_sentences, character_coverage=a.character_coverage,
                             spm_threads=a.spm_threads, tokenizer=a.tokenizer, shard_docs=a.shard_docs,
                             workers=a.workers, force=a.force, progress=progress)
        print(stats["manifest"])
    elif a.stage == "clean":
        clean(a.input, a.out, fmt=a.fmt, doc_boundary=a.doc_boundary, normalize=a.normalize, splitter=a.splitter,
              min_chars=a.min_chars, max_chars=a.max_chars, dedupe=a.dedupe, workers=a.workers, force=a.force,
              progress=progress)
        print(a.out / CORPUS)
    elif a.stage == "split":
        split(a.out, a.valid, a.test, a.seed, force=a.force)
        print(a.out / "sentences")
    elif a.stage == "spm":
        train_tokenizer(a.out, a.vocab_size, a.family, a.model_type, a.spm_input_sentences, a.character_coverage,
                        a.seed, a.spm_threads, a.tokenizer, force=a.force)
        print(a.out / "spm.model")
    else:
        print(tokenize(a.out, a.workers, a.shard_tokens, a.shard_docs, force=a.force, progress=progress)["manifest"])


def main(argv: list[str] | None = None) -> None:
    global _quiet
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("all", *STAGES, "-h", "--help"):
        argv = ["all", *argv]
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.stage is None:
        parser.print_help(sys.stderr)
        sys.exit(2)
    _quiet = a.quiet
    progress = False if a.quiet else None
    try:
        a.out.mkdir(parents=True, exist_ok=True)
        with contextlib.nullcontext() if a.stage == "all" else _exclusive(a.out):  # run_pipeline locks itself
            _run_stage(a, progress)
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        print(f"error: {e.strerror or e}{f': {e.filename}' if e.filename else ''}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: re-run the same command to resume", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
