"""Parallel data for TreLM-style training (004): sentence pairs -> subword ids on each side -> alignments in both
directions -> parallel shards, manifest.json and dictionary.tsv (docs/shard_format.md, "Parallel shards").

    python -m data_tools.cli.parallel --source-file en.txt --target-file uk.txt [--docs chapters.txt] \\
        --source-tokenizer MODEL_DIR_OR_HUB_ID --target-tokenizer spm.model --out DIR [options]
    python -m data_tools.cli.parallel --tsv pairs.tsv [--tsv-header] ...

Source side: the English source model's Hugging Face tokenizer; target side: the target SentencePiece model;
both without special tokens. Pairs with an empty side, no pieces or more than ``--max-pieces`` on a side are
dropped and counted; the aligner runs once over all pairs, in both directions; the split by document comes
afterwards, and dictionary.tsv counts train links only (``data_tools.pairs.build``). Errors are one ``error:``
line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_tools.typed_options import as_invoked, parse_size
from data_tools.errors import ArgumentParser, cli_errors
from data_tools.pairs.align import AlignerConfig
from data_tools.pairs.build import ALIGNERS, ParallelOptions, build_parallel
from data_tools.pairs.parallel_shards import ShardOptions
from data_tools.pairs.parallel_text import ParallelInput
from data_tools.pipeline.log import set_quiet


def build_parser(prog: str = "xpt-data parallel") -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=as_invoked(__doc__, prog),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("input (two line-aligned files, or one TSV)")
    g.add_argument("--source-file", type=Path, help="source (English) side, one sentence per line")
    g.add_argument("--target-file", type=Path, help="target side, line-aligned with --source-file")
    g.add_argument("--tsv", type=Path, help="source<TAB>target per line")
    g.add_argument("--tsv-header", action="store_true", help="the TSV's first line is a header")
    g.add_argument("--docs", type=Path, help="one document id per input line (default: every pair its own "
                                             "document); the split keeps a document's pairs together")
    g = p.add_argument_group("tokenizers")
    g.add_argument("--source-tokenizer", required=True, help="source model directory or hub id (AutoTokenizer)")
    g.add_argument("--target-tokenizer", required=True, type=Path, help="target SentencePiece model")
    g.add_argument("--max-pieces", type=int, default=510, help="drop pairs with more pieces on a side (default 510)")
    g = p.add_argument_group("alignment")
    g.add_argument("--aligner", default="fast_align", choices=ALIGNERS,
                   help="fast_align: built-in numpy fast_align -d -o -v (default); eflomal: the external "
                        "eflomal-align program, if installed")
    d = AlignerConfig()
    g.add_argument("--iterations", type=int, default=d.iterations, help="passes, the last one Viterbi (fast_align -I)")
    g.add_argument("--p0", type=float, default=d.p0, help="null-alignment probability (fast_align -p)")
    g.add_argument("--tension", type=float, default=d.tension, help="starting diagonal tension (fast_align -T)")
    g.add_argument("--fixed-tension", action="store_true", help="keep the tension fixed (fast_align without -o)")
    g.add_argument("--alpha", type=float, default=d.alpha,
                   help="lexical Dirichlet prior, variational Bayes (fast_align -v -a); 0: maximum likelihood")
    g = p.add_argument_group("output")
    g.add_argument("--out", required=True, type=Path, help="output directory")
    g.add_argument("--valid", type=parse_size, default=0.05, help="validation documents: count or fraction")
    g.add_argument("--test", type=parse_size, default=0.05, help="test documents: count or fraction")
    g.add_argument("--seed", type=int, default=0, help="split seed")
    g.add_argument("--shard-pairs", type=int, default=100_000, help="pairs per shard")
    g.add_argument("--dictionary-min-count", type=int, default=2, help="minimum links for a dictionary entry")
    g.add_argument("--quiet", action="store_true", help="no log lines (errors still print)")
    return p


def options_from_args(a: argparse.Namespace) -> ParallelOptions:
    return ParallelOptions(
        out=a.out, source_tokenizer=a.source_tokenizer, target_tokenizer=a.target_tokenizer, aligner=a.aligner,
        input=ParallelInput(a.source_file, a.target_file, a.tsv, a.tsv_header, a.docs),
        align=AlignerConfig(a.iterations, a.p0, a.tension, not a.fixed_tension, a.alpha),
        shards=ShardOptions(a.valid, a.test, a.seed, a.shard_pairs),
        max_pieces=a.max_pieces, dictionary_min_count=a.dictionary_min_count)


def main(argv: list[str] | None = None, prog: str = "xpt-data parallel") -> int:
    a = build_parser(prog).parse_args(argv)
    set_quiet(a.quiet)
    with cli_errors():
        stats = build_parallel(options_from_args(a))
    print(stats["manifest"])
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m data_tools.cli.parallel"))
