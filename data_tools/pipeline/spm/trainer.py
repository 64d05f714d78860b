"""SentencePiece training with the special-token layout of the source model family (``layouts``): from a
text file (``xpt-data spm-train``) or from an iterable of sentences (the pipeline's spm stage).

The trainer reads pad/bos(cls)/eos(sep)/unk ids from the model and looks up the mask piece, so either
layout works; matching the family keeps the conventional ids (RoBERTa: <s>=0 <pad>=1 </s>=2 <unk>=3).

SentencePiece's unigram result depends on its thread count (float sums in a different order), so the thread
count is a fixed option (default 8), not the machine's core count: the same corpus gives the same model
everywhere.
"""
from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Iterable

import sentencepiece as spm

from data_tools.errors import PrepareError
from data_tools.pipeline.options import DEFAULTS
from data_tools.pipeline.spm.layouts import LAYOUTS, MODEL_TYPES

MAX_SENTENCE_BYTES = 16384  # SentencePiece trains on no sentence longer (it leaves them out without a word)
_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")


def normalization_rule(normalize: str) -> str | None:
    """SentencePiece's normaliser for prepare's ``--normalize``: None (its default, ``nmt_nfkc``) for NFKC;
    ``identity`` for NFC and none, whose text the clean stage left as it wants it: ``nmt_nfkc`` would fold
    full-width letters, circled digits and ligatures in every shard all the same."""
    return None if normalize == "NFKC" else "identity"


def _trainer_options(vocab_size: int, family: str, model_type: str, seed: int, num_threads: int,
                     character_coverage: float, normalization_rule_name: str | None = None,
                     byte_fallback: bool = False) -> dict:
    if family not in LAYOUTS:
        raise PrepareError(f"unknown family '{family}' (valid: {', '.join(LAYOUTS)})")
    if model_type not in MODEL_TYPES:
        raise PrepareError(f"unknown model type '{model_type}' (valid: {', '.join(MODEL_TYPES)})")
    spm.set_random_generator_seed(seed)
    rule = {} if normalization_rule_name is None else {"normalization_rule_name": normalization_rule_name}
    return dict(vocab_size=vocab_size, model_type=model_type, character_coverage=character_coverage,
                shuffle_input_sentence=True, seed_sentencepiece_size=1_000_000, num_threads=num_threads,
                max_sentence_length=MAX_SENTENCE_BYTES, minloglevel=2, **rule, **LAYOUTS[family],
                # only when on: a flag passed at all is written into the model (its bytes, and sha256, change)
                **({"byte_fallback": True} if byte_fallback else {}))


def _run_trainer(vocab_size: int, model_type: str, **kw) -> None:
    try:
        spm.SentencePieceTrainer.train(vocab_size=vocab_size, model_type=model_type, **kw)
    except RuntimeError as e:  # "... Vocabulary size too high (8000). Please set it to a value <= 3105."
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
        m = _TOO_HIGH.search(msg)
        if m:
            raise PrepareError(f"--vocab-size {vocab_size} is more than this corpus supports: SentencePiece "
                               f"reports a maximum of {m.group(2)} ({model_type}); use --vocab-size {m.group(2)} "
                               "or less, or more text") from None
        # its advice names its own options ("--character_coverage"): xpt-data's are spelled with dashes
        said = re.sub(r"--(\w+)", lambda m: "--" + m.group(1).replace("_", "-"), msg.split("] ")[-1])
        raise PrepareError(f"SentencePiece training failed: {said}") from None


def train_spm(text_file: Path, out_prefix: Path, vocab_size: int, family: str = DEFAULTS.family,
              model_type: str = DEFAULTS.model_type, input_sentence_size: int = DEFAULTS.spm_input_sentences,
              seed: int = DEFAULTS.seed, num_threads: int = DEFAULTS.spm_threads,
              character_coverage: float = DEFAULTS.character_coverage,
              byte_fallback: bool = DEFAULTS.byte_fallback) -> Path:
    """Train on ``text_file`` (one sentence per line); writes PREFIX.model and PREFIX.vocab.

    ``input_sentence_size``: SentencePiece samples this many lines when the file has more (0: use all).
    Raises PrepareError for a vocabulary size the corpus cannot support, naming SentencePiece's maximum."""
    opts = _trainer_options(vocab_size, family, model_type, seed, num_threads, character_coverage,
                            byte_fallback=byte_fallback)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    _run_trainer(input=str(text_file), model_prefix=str(out_prefix), input_sentence_size=input_sentence_size,
                 **opts)
    return out_prefix.with_suffix(".model")


def write_vocab(model: bytes, path: Path) -> None:
    """PREFIX.vocab as SentencePiece writes it: ``piece<TAB>score`` per id."""
    sp = spm.SentencePieceProcessor(model_proto=model)
    path.write_text("".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size())),
                    encoding="utf-8")


def train_spm_from_sentences(sentences: Iterable[str], out_prefix: Path, vocab_size: int,
                             family: str = DEFAULTS.family, model_type: str = DEFAULTS.model_type,
                             seed: int = DEFAULTS.seed, num_threads: int = DEFAULTS.spm_threads,
                             character_coverage: float = DEFAULTS.character_coverage,
                             normalization_rule_name: str | None = None,
                             byte_fallback: bool = DEFAULTS.byte_fallback) -> Path:
    """Train on every sentence of an iterable; writes PREFIX.model and PREFIX.vocab. Unlike ``train_spm`` the
    model records no file paths, so the same sentences give a byte-identical model in any directory.
    ``normalization_rule_name``: SentencePiece's (``normalization_rule``); None keeps its default."""
    opts = _trainer_options(vocab_size, family, model_type, seed, num_threads, character_coverage,
                            normalization_rule_name, byte_fallback)
    buf = io.BytesIO()
    _run_trainer(sentence_iterator=iter(sentences), model_writer=buf, input_sentence_size=0, **opts)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    model = out_prefix.with_suffix(".model")
    model.write_bytes(buf.getvalue())
    write_vocab(buf.getvalue(), out_prefix.with_suffix(".vocab"))
    return model
