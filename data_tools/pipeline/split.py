"""Stage (b), split: assign whole documents to train/valid/test -> ``sentences/{train,valid,test}.jsonl``;
``--valid``/``--test`` sizes are document counts or fractions (``data_tools.typed_options.parse_size``)."""
from __future__ import annotations

import collections
import time
from pathlib import Path

import numpy as np

from data_tools.errors import PrepareError
from data_tools.pipeline.log import log
from data_tools.pipeline.options import DEFAULTS, PrepareOptions
from data_tools.pipeline.shards import sentences_of
from data_tools.pipeline.state import (CORPUS, SPLITS, STAGE_VERSION, HashingWriter, drop_state, file_signature,
                                       fingerprint, load_state, save_state, split_path, up_to_date)


def _count(size: int | float, n: int, flag: str) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size < 0:
        raise PrepareError(f"{flag} {size!r}: expected a document count or a fraction in [0, 1)")
    if isinstance(size, int):
        return size
    if size >= 1:
        raise PrepareError(f"{flag} {size}: a fraction must be < 1 (or give a whole number of documents)")
    return max(1, round(size * n)) if size > 0 else 0


def split_counts(n: int, valid: int | float, test: int | float) -> tuple[int, int]:
    """Valid and test document counts for ``n`` documents; at least one document must be left for train."""
    n_valid, n_test = _count(valid, n, "--valid"), _count(test, n, "--test")
    if n_valid + n_test >= n:
        raise PrepareError(f"too few documents: {n} documents cannot give {n_valid} valid + {n_test} test + at "
                           "least 1 train (lower --valid/--test, or add text)")
    return n_valid, n_test


def assign_documents(n: int, n_valid: int, n_test: int, seed: int) -> np.ndarray:
    """(n,) int8, the split of each document (index into SPLITS): a seeded permutation, the first ``n_valid``
    documents of it to valid, the next ``n_test`` to test. ``data_tools.cli.parallel`` splits the same way."""
    order = np.random.default_rng(seed).permutation(n)
    assign = np.zeros(n, np.int8)
    assign[order[:n_valid]] = 1
    assign[order[n_valid:n_valid + n_test]] = 2
    return assign


def split(out: Path, opts: PrepareOptions = DEFAULTS, force: bool = False) -> dict:
    """Stage (b): assign whole documents to train/valid/test (a seeded permutation; each split keeps corpus
    order) -> ``sentences/{train,valid,test}.jsonl``."""
    valid, test, seed = opts.valid, opts.test, opts.seed
    t0 = time.perf_counter()
    out = Path(out)
    corpus = out / CORPUS
    if not corpus.is_file():
        raise PrepareError(f"{corpus} not found: run the clean stage first")
    recorded = load_state(out, "clean")
    state = up_to_date(out, "clean", recorded["key"]) if recorded else None
    if state:
        sig = {**state["outputs"][str(CORPUS)], "documents": state["stats"]["documents"]}
    else:
        sig = file_signature(corpus)
    n = sig["documents"]
    n_valid, n_test = split_counts(n, valid, test)
    key = fingerprint({"stage": "split", "v": STAGE_VERSION, "corpus": sig["sha256"], "valid": n_valid,
                       "test": n_test, "seed": seed})
    if not force and (state := up_to_date(out, "split", key)):
        log("split: up to date (" + ", ".join(f"{s} {v['documents']}" for s, v in state["stats"].items()) +
            " documents), skipped")
        return {**state["stats"], "seconds": time.perf_counter() - t0, "skipped": True}
    drop_state(out, "split")
    assign = assign_documents(n, n_valid, n_test, seed)
    writers = [HashingWriter(split_path(out, s)) for s in SPLITS]
    counts = {s: collections.Counter() for s in SPLITS}
    try:
        with open(corpus, "rb") as f:
            for i, line in enumerate(f):
                if i >= n:
                    raise PrepareError(f"{corpus} changed since it was recorded; re-run the clean stage")
                s = int(assign[i])
                writers[s].write(line)
                counts[SPLITS[s]]["documents"] += 1
                counts[SPLITS[s]]["sentences"] += len(sentences_of(line, corpus, i + 1))
    except BaseException:
        for w in writers:
            w.abort()
        raise
    outputs = {str(split_path(out, s).relative_to(out)): w.commit() for s, w in zip(SPLITS, writers)}
    stats = {s: {"documents": counts[s]["documents"], "sentences": counts[s]["sentences"]} for s in SPLITS}
    save_state(out, "split", key, outputs, stats)
    log("split: " + ", ".join(f"{s} {v['documents']} documents / {v['sentences']} sentences"
                              for s, v in stats.items()) + f" (seed {seed})")
    return {**stats, "seconds": time.perf_counter() - t0}


def split_signature(out: Path, split_name: str) -> dict:
    state = load_state(out, "split")
    rel = str(split_path(out, split_name).relative_to(out))
    if state and up_to_date(out, "split", state["key"]) and rel in state["outputs"]:
        return {**state["outputs"][rel], **state["stats"][split_name]}
    path = split_path(out, split_name)
    if not path.is_file():
        raise PrepareError(f"{path} not found: run the split stage first")
    return file_signature(path)

