"""Corpus preparation: raw text -> clean sentences -> document splits -> SentencePiece -> WebDataset shards.

    python -m data_tools.cli.prepare --input FILE_OR_DIR... --out DIR [options]      every stage (= `all`)
    python -m data_tools.cli.prepare clean    --input ... --out DIR                  read, normalise, split, dedupe
    python -m data_tools.cli.prepare split    --out DIR [--valid --test --seed]      split by document
    python -m data_tools.cli.prepare spm      --out DIR [--vocab-size ...]           train SentencePiece on train
    python -m data_tools.cli.prepare tokenize --out DIR [--workers --shard-tokens]   shards + manifest.json
    python -m data_tools.cli.prepare --input ... --out DIR --hf-tokenizer SOURCE     no spm stage: the source's
                                                                                     tokenizer

Layout of DIR: ``sentences/corpus.jsonl`` (clean) and ``sentences/{train,valid,test}.jsonl`` (split), one
document per line as a JSON list of sentences; ``spm.model``/``spm.vocab``; ``{split}-NNNNNN.tar`` shards and
``manifest.json`` (docs/shard_format.md); ``.prepare/`` holds each stage's completion record. A stage whose
inputs and options are unchanged since its last complete run is skipped (``--force`` redoes it), the clean stage
resumes from its last checkpoint (``.prepare/clean.partial.json``) and the tokenize stage shard by shard, so
re-running the same command after a crash finishes the job.
Errors are one ``error:`` line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from data_tools.typed_options import add_options, as_invoked, options_from_args, positive_int
from data_tools.errors import ArgumentParser, cli_errors
from data_tools.pipeline.clean.stage import clean
from data_tools.pipeline.log import set_quiet
from data_tools.pipeline.options import PrepareOptions
from data_tools.pipeline.run import prepare, run_pipeline
from data_tools.pipeline.shard_stage import tokenize
from data_tools.pipeline.split import split
from data_tools.pipeline.state import CORPUS, exclusive
from data_tools.pipeline.spm.stage import train_tokenizer

# ``prepare``/``run_pipeline``: the library's one-call entries, imported from here (tests, benchmarks/bench_prepare.py).
__all__ = ["main", "prepare", "run_pipeline"]

STAGES = ("clean", "split", "spm", "tokenize")
GROUPS = {"clean": "reading and cleaning", "split": "splitting by document", "spm": "SentencePiece",
          "tokenize": "shards"}  # stage -> title of its flags in --help; the flags are PrepareOptions' fields


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--force", action="store_true", help="redo the stage(s) even if up to date")
    p.add_argument("--quiet", action="store_true", help="no progress bars or log lines (errors still print)")


def _add_workers(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="worker processes for cleaning and tokenization (default: all cores; the output does not "
                        "depend on it)")


def _add_stage(p: argparse.ArgumentParser, stage: str, skip: tuple[str, ...] = ()) -> None:
    g = p.add_argument_group(GROUPS[stage])
    if stage == "clean":
        g.add_argument("--input", nargs="+", required=True, type=Path,
                       help="files (gzip/bzip2/xz allowed) or directories (every file below, sorted)")
    add_options(g, PrepareOptions, group=stage, skip=skip)


def build_parser(implicit_all: bool = False, prog: str = "xpt-data prepare") -> argparse.ArgumentParser:
    """``implicit_all``: the command line named no stage, so ``all``'s usage, help and errors read ``prog`` alone:
    ``xpt-data prepare --help`` is the help of a whole run, every flag, with the stages listed above them."""
    doc = as_invoked(__doc__, prog)
    stages_line = (f"stages: {'|'.join(('all', *STAGES))} (default all); `{prog} STAGE --help` lists the flags of "
                   "one stage")
    p = ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=stages_line)
    sub = p.add_subparsers(dest="stage", metavar="{all,clean,split,spm,tokenize}")
    for name, help_, workers, stages in [
        ("all", "every stage (the default when no stage is named)", True, STAGES),
        ("clean", "read, normalise, sentence-split, filter, dedupe -> sentences/corpus.jsonl", True, ["clean"]),
        ("split", "split documents -> sentences/{train,valid,test}.jsonl", False, ["split"]),
        ("spm", "train SentencePiece on the train split -> spm.model", False, ["spm"]),
        ("tokenize", "tokenize into shards + manifest.json (resumes)", True, ["tokenize"]),
    ]:
        if name == "all":  # the whole run's help: what the stages do, then every flag
            kw = {"description": doc, "epilog": stages_line, "formatter_class": argparse.RawDescriptionHelpFormatter,
                  **({"prog": prog} if implicit_all else {})}
        else:
            kw = {"description": help_}
        q = sub.add_parser(name, help=help_, **kw)
        _add_common(q)
        if workers:
            _add_workers(q)
        for stage in stages:  # `all` takes the one --seed with the split flags
            _add_stage(q, stage, skip=("seed",) if name == "all" and stage == "spm" else ())
    return p


def _run_stage(a: argparse.Namespace, progress: bool | None) -> None:
    opts = options_from_args(PrepareOptions, a)  # flags a stage does not take keep their defaults
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


def main(argv: list[str] | None = None, prog: str = "xpt-data prepare") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # as `xpt-data` alone: the help, on stderr, exit status 2
        with contextlib.redirect_stdout(sys.stderr), contextlib.suppress(SystemExit):
            build_parser(True, prog).parse_args(["all", "--help"])
        return 2
    implicit = argv[0] not in ("all", *STAGES)  # `--help` too: the flags of a whole run
    a = build_parser(implicit, prog).parse_args(["all", *argv] if implicit else argv)
    set_quiet(a.quiet)
    progress = False if a.quiet else None
    try:
        with cli_errors(a.out):
            with contextlib.nullcontext() if a.stage == "all" else exclusive(a.out):  # run_pipeline locks itself
                _run_stage(a, progress)
    except KeyboardInterrupt:
        print("interrupted: re-run the same command to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m data_tools.cli.prepare"))
