"""Stage (d), tokenize: every split into ``{split}-NNNNNN.tar`` shards (in parallel; complete shards of an
earlier run are kept) and ``manifest.json``."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import re
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import sha256_file
from data_tools.pipeline.log import log, progress_bar
from data_tools.pipeline.options import DEFAULTS, PrepareOptions
from data_tools.pipeline.shards import (RECORDS, HfEncoder, ShardTask, completed, forget, hf_manifest_keys, plan_split,
                                        write_manifest, write_shard_task, writer_version)
from data_tools.pipeline.state import SPLITS, STATE, load_state, split_path, up_to_date
from data_tools.pipeline.workers import die_with_parent


def _run_shards(tasks: list[ShardTask], workers: int, bar) -> Iterator[dict]:
    if workers <= 1 or len(tasks) <= 1:
        for t in tasks:
            rec = write_shard_task(t)
            bar.update(t.n_docs)
            yield rec
        return
    with mp.get_context("spawn").Pool(min(workers, len(tasks)), die_with_parent, (os.getpid(),)) as pool:
        for rec in pool.imap_unordered(write_shard_task, tasks):
            bar.update(rec["documents"])
            yield rec


def _open_tokenizer(out: Path, opts: PrepareOptions):
    """(what the shard tasks open: spm.model or the HF tokenizer's local directory, an encoder, vocab size, the
    sha256 in every shard's up-to-date key, what the manifest records about the tokenizer)."""
    if opts.hf_tokenizer is not None:
        if opts.tokenizer is not None:
            raise PrepareError("--tokenizer (SentencePiece) and --hf-tokenizer exclude each other")
        from data_tools.piece_tokenizers import HfTokenizer
        hf = HfTokenizer(opts.hf_tokenizer)
        record = hf_manifest_keys(hf)
        # The kind is part of the key so a SentencePiece shard can never pass for an HF one; SentencePiece keys
        # stay as they were, so shards of earlier runs remain up to date.
        return hf.path.resolve(), HfEncoder(hf.tok), hf.vocab_size, f"huggingface:{record['tokenizer_sha256']}", record
    model = out / "spm.model"
    if not model.is_file():
        raise PrepareError(f"{model} not found: run the spm stage first")
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(model))
    return model, sp, sp.get_piece_size(), hashlib.sha256(model.read_bytes()).hexdigest(), model


def tokenize(out: Path, opts: PrepareOptions = DEFAULTS, workers: int = 1, force: bool = False,
             progress: bool | None = None) -> dict:
    """Stage (d): tokenize every split into shards (resuming complete ones) and write manifest.json."""
    shard_tokens, shard_docs = opts.shard_tokens, opts.shard_docs
    t0 = time.perf_counter()
    out = Path(out)
    if shard_docs is not None and shard_docs < 1 or shard_docs is None and (shard_tokens is None or shard_tokens < 1):
        raise PrepareError("--shard-docs / --shard-tokens must be at least 1")
    model, sp, vocab_size, tok_sha, tok_record = _open_tokenizer(out, opts)
    plans: dict[str, list[ShardTask]] = {}
    split_state = load_state(out, "split")
    recorded = split_state and up_to_date(out, "split", split_state["key"]) and split_state["outputs"]
    cached = []
    for s in SPLITS:
        src = split_path(out, s)
        if not src.is_file():
            raise PrepareError(f"{src} not found: run the split stage first")
        sha = (recorded or {}).get(str(src.relative_to(out)), {}).get("sha256")
        cache = out / STATE / "plans" / f"{s}.json"
        if force:  # --force reads every split file again
            cache.unlink(missing_ok=True)
        plans[s], _, hit = plan_split(out, s, src, model, tok_sha, vocab_size, sp, shard_tokens, shard_docs,
                                      cache=cache, recorded_sha256=sha)
        cached += [src.name] if hit else []
    if cached:
        log(f"tokenize: {', '.join(cached)} unchanged since the last run's plan (size, mtime, ctime, inode): "
            "not read again")
    tasks = [t for s in SPLITS for t in plans[s]]
    planned = {t.name for t in tasks}
    # Shards (and temp files) of an earlier plan that this one does not produce would confuse a glob reader.
    # Temp files are from killed runs (runs through the CLI or run_pipeline hold the directory's lock).
    stale = []
    for f in sorted(out.iterdir()):
        m = re.fullmatch(rf"((?:{'|'.join(SPLITS)})-\d{{6}}\.tar)(\.tmp\d*)?", f.name)
        if m and (m.group(2) or m.group(1) not in planned):
            stale.append((f, not m.group(2)))
    if force:
        for t in tasks:
            forget(t)
    records = {t.name: rec for t in tasks if (rec := completed(t))}
    todo = [t for t in tasks if t.name not in records]
    if todo or any(shard for _, shard in stale):  # first: a run killed from here on leaves no manifest that names
        (out / "manifest.json").unlink(missing_ok=True)  # a shard it removed or is rewriting
    for f, shard in stale:
        f.unlink()
        if shard:
            (out / RECORDS / f"{f.name}.json").unlink(missing_ok=True)
            log(f"tokenize: removed {f.name} (not part of this plan)")
    if records:
        log(f"tokenize: {len(records)} of {len(tasks)} shards already complete, skipped")
    if todo:
        log(f"tokenize: writing {len(todo)} shard(s) with {min(workers, len(todo))} worker(s)")
        t1 = time.perf_counter()
        bar = progress_bar(progress, desc="tokenize", unit="doc", total=sum(t.n_docs for t in todo))
        try:
            for rec in _run_shards(todo, workers, bar):
                records[rec["shard"]] = rec
        finally:
            bar.close()
        written = sum(records[t.name]["sentences"] for t in todo)
        dt = time.perf_counter() - t1
        log(f"tokenize: {written} sentences in {dt:.1f}s ({written / max(dt, 1e-9):,.0f} sentences/s)")
        spelled = sum(records[t.name].get("special_spellings", 0) for t in todo)
        if spelled:
            log(f"tokenize: {spelled} special token(s) spelled out in the text (a literal \"[MASK]\" or \"<mask>\") "
                "became unk: shards hold no special ids")
    summary = {}
    for s in SPLITS:
        recs = [records[t.name] for t in plans[s]]
        summary[s] = {"shards": [t.name for t in plans[s]],
                      **{k: sum(r[k] for r in recs) for k in ("documents", "sentences", "tokens")},
                      "shard_documents": [r["documents"] for r in recs], "shard_tokens": [r["tokens"] for r in recs],
                      # a shard complete from a run before the records held it is hashed now
                      "shard_sha256": [r.get("sha256") or sha256_file(out / r["shard"]) for r in recs]}
        if all("unk" in r for r in recs):  # records since 2026-12-04 count them
            summary[s]["unk_tokens"] = sum(r["unk"] for r in recs)
    extra = {"writer_version": writer_version(sp), "dtype": np.dtype(plans["train"][0].dtype if plans["train"] else
                               ("uint16" if vocab_size <= 65536 else "uint32")).name}
    info = {st: s["stats"] for st in ("clean", "split") if (s := load_state(out, st))}
    if info:
        extra["prepare"] = info
    manifest = write_manifest(out, tok_record, vocab_size, summary, **extra)
    log("tokenize: " + ", ".join(f"{s} {v['documents']} docs / {v['sentences']} sentences / {v['tokens']} tokens "
                                 f"in {len(v['shards'])} shard(s)" for s, v in summary.items()))
    unk = {s: v["unk_tokens"] for s, v in summary.items() if v.get("unk_tokens")}
    if unk:  # text the vocabulary cannot spell: trained on as unk, said here
        log("tokenize: warning: " + ", ".join(f"{s} {n} ({n / summary[s]['tokens']:.2%})" for s, n in unk.items())
            + " tokens are unk: characters the vocabulary lacks (--character-coverage leaves the rarest out; a run "
            "of them is one unk), which the model cannot tell apart")
    return {"manifest": str(manifest), "splits": summary, "written_shards": len(todo),
            "written_sentences": sum(records[t.name]["sentences"] for t in todo),
            "seconds": time.perf_counter() - t0}
