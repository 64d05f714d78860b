"""Corpus preparation: raw text -> clean sentences -> document splits -> SentencePiece -> WebDataset shards.

    python -m data_tools.prepare --input FILE_OR_DIR... --out DIR [options]      every stage (= `all`)
    python -m data_tools.prepare clean    --input ... --out DIR                  read, normalise, split, dedupe
    python -m data_tools.prepare split    --out DIR [--valid --test --seed]      split by document
    python -m data_tools.prepare spm      --out DIR [--vocab-size ...]           train SentencePiece on train
    python -m data_tools.prepare tokenize --out DIR [--workers --shard-tokens]   shards + manifest.json
    python -m data_tools.prepare --input ... --out DIR --hf-tokenizer SOURCE     no spm stage: the source model's
                                                                                 own Hugging Face tokenizer

Layout of DIR: ``sentences/corpus.jsonl`` (clean) and ``sentences/{train,valid,test}.jsonl`` (split), one
document per line as a JSON list of sentences; ``spm.model``/``spm.vocab``; ``{split}-NNNNNN.tar`` shards and
``manifest.json`` (docs/shard_format.md); ``.prepare/`` holds each stage's completion record. A stage whose
inputs and options are unchanged since its last complete run is skipped (``--force`` redoes it), and the
tokenize stage resumes shard by shard, so re-running the same command after a crash finishes the job.
Errors are one ``error:`` line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from pathlib import Path

from data_tools.clean import clean
from data_tools.errors import cli_errors
from data_tools.log import set_quiet
from data_tools.readers import DOC_BOUNDARIES, FORMATS
from data_tools.options import DEFAULTS, PrepareOptions, help_of
from data_tools.spm_train import LAYOUTS, MODEL_TYPES
from data_tools.split import parse_size, split
from data_tools.state import CORPUS, exclusive
from data_tools.text import NORMALIZE_FORMS
from data_tools.shard_stage import tokenize
from data_tools.vocab import train_tokenizer

STAGES = ("clean", "split", "spm", "tokenize")


def run_pipeline(inputs: list[Path | str], out: Path, opts: PrepareOptions = DEFAULTS, *, workers: int = 1,
                 force: bool = False, progress: bool | None = None, **changes) -> dict:
    """Every stage; returns each stage's stats (with ``seconds``) and the manifest path. ``changes`` are
    ``PrepareOptions`` fields that override ``opts`` (``run_pipeline(inputs, out, vocab_size=8000)``)."""
    opts = opts.replace(**changes) if changes else opts
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with exclusive(out):
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
    g.add_argument("--format", dest="fmt", default=DEFAULTS.fmt, choices=FORMATS, help=help_of("fmt"))
    g.add_argument("--doc-boundary", default=DEFAULTS.doc_boundary, choices=DOC_BOUNDARIES,
                   help=help_of("doc_boundary"))
    g.add_argument("--normalize", default=DEFAULTS.normalize, choices=NORMALIZE_FORMS, help=help_of("normalize"))
    g.add_argument("--splitter", default=DEFAULTS.splitter, help=help_of("splitter"))
    g.add_argument("--min-chars", type=int, default=DEFAULTS.min_chars, help=help_of("min_chars"))
    g.add_argument("--max-chars", type=int, default=DEFAULTS.max_chars, help=help_of("max_chars"))
    g.add_argument("--no-dedupe", dest="dedupe", action="store_false",
                   help="keep exact duplicate sentences (default: drop all but the first)")


def _add_split(p: argparse.ArgumentParser, seed: bool = True) -> None:
    g = p.add_argument_group("splitting by document")
    g.add_argument("--valid", type=parse_size, default=DEFAULTS.valid, help=help_of("valid"))
    g.add_argument("--test", type=parse_size, default=DEFAULTS.test, help=help_of("test"))
    if seed:
        g.add_argument("--seed", type=int, default=DEFAULTS.seed, help=help_of("seed"))


def _add_spm(p: argparse.ArgumentParser, seed: bool = True) -> None:
    g = p.add_argument_group("SentencePiece")
    g.add_argument("--vocab-size", type=_positive, default=DEFAULTS.vocab_size, help=help_of("vocab_size"))
    g.add_argument("--family", default=DEFAULTS.family, choices=sorted(LAYOUTS), help=help_of("family"))
    g.add_argument("--model-type", default=DEFAULTS.model_type, choices=MODEL_TYPES, help=help_of("model_type"))
    g.add_argument("--spm-input-sentences", type=int, default=DEFAULTS.spm_input_sentences,
                   help=help_of("spm_input_sentences"))
    g.add_argument("--character-coverage", type=float, default=DEFAULTS.character_coverage,
                   help=help_of("character_coverage"))
    g.add_argument("--spm-threads", type=_positive, default=DEFAULTS.spm_threads, help=help_of("spm_threads"))
    g.add_argument("--tokenizer", type=Path, default=DEFAULTS.tokenizer, help=help_of("tokenizer"))
    if seed:
        g.add_argument("--seed", type=int, default=DEFAULTS.seed, help=help_of("seed"))


def _add_tokenize(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("shards")
    m = g.add_mutually_exclusive_group()
    m.add_argument("--shard-tokens", type=_positive, default=DEFAULTS.shard_tokens, help=help_of("shard_tokens"))
    m.add_argument("--shard-docs", type=_positive, default=DEFAULTS.shard_docs, help=help_of("shard_docs"))
    g.add_argument("--hf-tokenizer", default=DEFAULTS.hf_tokenizer, metavar="DIR_OR_ID", help=help_of("hf_tokenizer"))


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


def _options(a: argparse.Namespace) -> PrepareOptions:
    """The stage's flags as options; flags a stage does not take keep their defaults."""
    names = {f.name for f in dataclasses.fields(PrepareOptions)}
    return DEFAULTS.replace(**{k: v for k, v in vars(a).items() if k in names})


def _run_stage(a: argparse.Namespace, progress: bool | None) -> None:
    opts = _options(a)
    if a.stage == "all":
        stats = run_pipeline(a.input, a.out, opts, workers=a.workers, force=a.force, progress=progress)
        print(stats["manifest"])
    elif a.stage == "clean":
        clean(a.input, a.out, opts, workers=a.workers, force=a.force, progress=progress)
        print(a.out / CORPUS)
    elif a.stage == "split":
        split(a.out, opts, force=a.force)
        print(a.out / "sentences")
    elif a.stage == "spm":
        train_tokenizer(a.out, opts, force=a.force)
        print(a.out / "spm.model")
    else:
        print(tokenize(a.out, opts, a.workers, force=a.force, progress=progress)["manifest"])


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("all", *STAGES, "-h", "--help"):
        argv = ["all", *argv]
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.stage is None:
        parser.print_help(sys.stderr)
        sys.exit(2)
    set_quiet(a.quiet)
    progress = False if a.quiet else None
    try:
        with cli_errors():
            a.out.mkdir(parents=True, exist_ok=True)
            with contextlib.nullcontext() if a.stage == "all" else exclusive(a.out):  # run_pipeline locks itself
                _run_stage(a, progress)
    except KeyboardInterrupt:
        print("interrupted: re-run the same command to resume", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
