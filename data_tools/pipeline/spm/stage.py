"""Stage (c), spm: train SentencePiece on the train split -> ``spm.model``/``spm.vocab``, or copy a given
model (``--tokenizer``)."""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from data_tools.errors import PrepareError
from data_tools.pipeline.log import log
from data_tools.pipeline.options import DEFAULTS, PrepareOptions
from data_tools.pipeline.split import split_signature
from data_tools.pipeline.shards import sentences_of
from data_tools.pipeline.spm.given import MASK_PIECES, given_tokenizer, has_mask_piece
from data_tools.pipeline.spm.layouts import LAYOUTS
from data_tools.pipeline.spm.trainer import (MAX_SENTENCE_BYTES, normalization_rule, train_spm_from_sentences,
                                            write_vocab)
from data_tools.pipeline.state import STAGE_VERSION, STATE, drop_state, fingerprint, save_state, split_path, up_to_date

MIN_VOCAB = 8  # a layout's special tokens (5 at most) and a few pieces; SentencePiece says what a corpus needs


def _copy(src: Path, dest: Path) -> None:
    """``src`` to ``dest`` through a temp file; nothing when they are the same file (``--tokenizer OUT/spm.model``,
    a re-run with the model an earlier run trained)."""
    if dest.exists() and dest.samefile(src):
        return
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def train_tokenizer(out: Path, opts: PrepareOptions = DEFAULTS, force: bool = False) -> dict:
    """Stage (c): SentencePiece on the train split (a seeded sample of ``opts.spm_input_sentences`` sentences
    when it has more) -> ``spm.model``/``spm.vocab``; or, with ``opts.tokenizer``, copy an existing model."""
    vocab_size, family, model_type, seed = opts.vocab_size, opts.family, opts.model_type, opts.seed
    input_sentences, character_coverage, threads = opts.spm_input_sentences, opts.character_coverage, opts.spm_threads
    tokenizer = opts.tokenizer
    t0 = time.perf_counter()
    out = Path(out)
    if family not in LAYOUTS:
        raise PrepareError(f"unknown family '{family}' (valid: {', '.join(LAYOUTS)})")
    model, vocab = out / "spm.model", out / "spm.vocab"
    if tokenizer is not None:
        tokenizer = Path(tokenizer)
        given = given_tokenizer(tokenizer)  # one line for a file that is not a model, before OUT/spm.model is replaced
        key = fingerprint({"stage": "spm", "copy": hashlib.sha256(tokenizer.read_bytes()).hexdigest()})
    else:
        if vocab_size < MIN_VOCAB:
            raise PrepareError(f"--vocab-size {vocab_size} is too small: it must be at least {MIN_VOCAB}")
        train = split_signature(out, "train")
        rule = normalization_rule(opts.normalize)
        key = fingerprint({"stage": "spm", "v": STAGE_VERSION, "train": train["sha256"], "vocab": vocab_size,
                           "family": family, "type": model_type, "sample": input_sentences,
                           "coverage": character_coverage, "seed": seed, "threads": threads,
                           **({"normalizer": rule} if rule else {}),  # NFKC's key as before: still up to date
                           **({"byte_fallback": True} if opts.byte_fallback else {})})
    if not force and (state := up_to_date(out, "spm", key)):
        log(f"spm: up to date (vocab {state['stats']['vocab_size']}), skipped")
        return {**state["stats"], "seconds": time.perf_counter() - t0, "skipped": True}
    drop_state(out, "spm")
    import sentencepiece as spm
    if tokenizer is not None:
        _copy(tokenizer, model)
        if tokenizer.with_suffix(".vocab").is_file():
            _copy(tokenizer.with_suffix(".vocab"), vocab)
        else:
            write_vocab(model.read_bytes(), vocab)
        log(f"spm: copied {tokenizer}")
        if not has_mask_piece(given):
            log(f"spm: note: {tokenizer} has no {' or '.join(MASK_PIECES)} piece: a decoder source needs none; an "
                "encoder source's masked LM needs one (a run's model.mask_token names another piece of it)")
        sampled = None
    else:
        if train["sentences"] == 0:
            raise PrepareError("the train split has no sentences")
        picks = None
        if train["sentences"] > input_sentences > 0:
            picks = np.sort(np.random.default_rng(seed).choice(train["sentences"], input_sentences, replace=False))
        sampled = train["sentences"] if picks is None else len(picks)

        too_long = 0  # sampled sentences SentencePiece leaves out: more than MAX_SENTENCE_BYTES

        def sample() -> Iterator[str]:
            nonlocal too_long
            i = j = 0
            with open(split_path(out, "train"), "rb") as f:
                for lineno, line in enumerate(f, 1):
                    for s in sentences_of(line, split_path(out, "train"), lineno):
                        if picks is None or (j < len(picks) and picks[j] == i):
                            too_long += len(s) * 4 > MAX_SENTENCE_BYTES and len(s.encode()) > MAX_SENTENCE_BYTES
                            yield s
                            j += 1
                        i += 1

        log(f"spm: training {model_type} vocab {vocab_size} ({family} layout"
            f"{', byte fallback' if opts.byte_fallback else ''}) on {sampled} of {train['sentences']} train "
            "sentences")
        trained = train_spm_from_sentences(sample(), out / STATE / "spm" / "spm", vocab_size, family, model_type,
                                           seed=seed, num_threads=threads, character_coverage=character_coverage,
                                           normalization_rule_name=rule, byte_fallback=opts.byte_fallback)
        os.replace(trained.with_suffix(".vocab"), vocab)
        os.replace(trained, model)
        if too_long:  # the line above counts them as trained on
            log(f"spm: warning: {too_long} of the {sampled} sentences are longer than {MAX_SENTENCE_BYTES} bytes, "
                "which SentencePiece leaves out of training (a character found only in them becomes <unk>): a "
                "paragraph the splitter did not cut (text without sentence punctuation); give --splitter or "
                "--max-chars")
    sp = spm.SentencePieceProcessor(model_file=str(model))
    stats = {"vocab_size": sp.get_piece_size(), "sampled_sentences": sampled,
             "sha256": hashlib.sha256(model.read_bytes()).hexdigest()}
    save_state(out, "spm", key, {"spm.model": {"bytes": model.stat().st_size}}, stats)
    return {**stats, "seconds": time.perf_counter() - t0}
