"""The whole preparation pipeline in one call: clean -> split -> spm (or the source model's Hugging Face
tokenizer) -> tokenize, under the output directory's lock (``state.exclusive``)."""
from __future__ import annotations

import time
from pathlib import Path

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import HfTokenizer
from data_tools.pipeline.clean.stage import clean
from data_tools.pipeline.options import DEFAULTS, PrepareOptions
from data_tools.pipeline.shard_stage import tokenize
from data_tools.pipeline.split import split
from data_tools.pipeline.state import exclusive
from data_tools.pipeline.spm.given import given_tokenizer
from data_tools.pipeline.spm.stage import train_tokenizer


def run_pipeline(inputs: list[Path | str], out: Path, opts: PrepareOptions = DEFAULTS, *, workers: int = 1,
                 force: bool = False, progress: bool | None = None, **changes) -> dict:
    """Every stage; returns each stage's stats (with ``seconds``) and the manifest path. ``changes`` are
    ``PrepareOptions`` fields that override ``opts`` (``run_pipeline(inputs, out, vocab_size=8000)``)."""
    opts = opts.replace(**changes) if changes else opts
    out = Path(out)
    # The tokenizer a later stage takes, checked before the clean stage reads the corpus (hours for a large one):
    # a missing or unusable one was said after the clean and split stages had run.
    if opts.tokenizer is not None and opts.hf_tokenizer is not None:
        raise PrepareError("--tokenizer and --hf-tokenizer are both given: --tokenizer is the SentencePiece model "
                           "of the spm stage, which --hf-tokenizer skips; give one")
    if opts.tokenizer is not None:
        given_tokenizer(opts.tokenizer)
    if opts.hf_tokenizer is not None:
        HfTokenizer(opts.hf_tokenizer)
    with exclusive(out):  # makes out; a failed run leaves no empty folder or lock behind
        return _run_all(inputs, out, opts, workers, force, progress)


def _run_all(inputs, out: Path, opts: PrepareOptions, workers: int, force: bool, progress: bool | None) -> dict:
    t0 = time.perf_counter()
    stats = {"clean": clean(inputs, out, opts, workers=workers, force=force, progress=progress)}
    stats["split"] = split(out, opts, force=force)
    if opts.hf_tokenizer is None:
        stats["spm"] = train_tokenizer(out, opts, force=force)
    else:  # the source model's own tokenizer (003's [lang->en][lang]): nothing to train
        stats["spm"] = {"skipped": True, "hf_tokenizer": opts.hf_tokenizer}
    stats["tokenize"] = tokenize(out, opts, workers, force=force, progress=progress)
    stats["manifest"] = stats["tokenize"]["manifest"]
    stats["seconds"] = time.perf_counter() - t0
    return stats


def prepare(inputs: list[Path | str], out: Path, opts: PrepareOptions = DEFAULTS, **kw) -> Path:
    """Every stage; returns the manifest path. Keywords as ``run_pipeline``."""
    return Path(run_pipeline(inputs, out, opts, **kw)["manifest"])
