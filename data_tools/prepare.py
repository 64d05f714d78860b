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
import contextlib
import os
import sys
import time
from pathlib import Path

from data_tools.clean import clean
from data_tools.errors import PrepareError
from data_tools.log import set_quiet
from data_tools.readers import DOC_BOUNDARIES, FORMATS
from data_tools.spm_train import DEFAULT_THREADS, LAYOUTS, MODEL_TYPES
from data_tools.split import parse_size, split
from data_tools.state import CORPUS, exclusive
from data_tools.text import NORMALIZE_FORMS
from data_tools.shard_stage import tokenize
from data_tools.vocab import train_tokenizer

STAGES = ("clean", "split", "spm", "tokenize")


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
    with exclusive(out):
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
        a.out.mkdir(parents=True, exist_ok=True)
        with contextlib.nullcontext() if a.stage == "all" else exclusive(a.out):  # run_pipeline locks itself
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
