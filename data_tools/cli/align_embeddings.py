"""Map target-language static embeddings onto a source space (source static embeddings, or the source model's
input embeddings from ``data_tools.cli.source_embeddings``): supervised by a bilingual dictionary (orthogonal
Procrustes) or unsupervised (MUSE-style adversarial training + Procrustes refinement,
data_tools/embeddings/adversarial.py); the library is data_tools/embeddings/mapping.py.

    python -m data_tools.cli.align_embeddings procrustes --target emb/uk.npy --source emb/minilm.npy \\
        --dictionary dictionary.tsv --out emb/uk_on_minilm [--weights count]
    python -m data_tools.cli.align_embeddings adversarial --target emb/uk.npy --source emb/minilm.npy \\
        --out emb/uk_adv --source-first-row 1996 --epochs 3 --iterations 500 --dis-hidden 512

Writes ``OUT.npy`` (float32 [target vocab, dim], row = target token id, in the source's coordinates; rows of
unseen target pieces stay zero and are listed in ``unseen_ids``), ``OUT.map.npy`` (W [dim, dim]) and the
``OUT.json`` sidecar (data_tools/embeddings/embedding_files.py) with the inputs' sha256, the affine map
(``(x - x_mean) W^T * scale + y_mean``, data_tools/embeddings/alignment.py), options and fit diagnostics:
dictionary pairs used and left out and mean cosine before/after (procrustes), criterion per epoch and the
chosen stage (adversarial; also ``OUT.diagnostics.json`` with losses and timings).

Rows are ranked by the sidecar's ``counts`` (most frequent first); matrices without counts (a model's input
embeddings) by id, starting at ``--source-first-row``/``--target-first-row``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_tools.typed_options import add_options, as_invoked, options_from_args
from data_tools.embeddings.adversarial import AdversarialOptions
from data_tools.embeddings.bilingual_dict import COLUMNS
from data_tools.embeddings.embedding_files import writable_prefix
from data_tools.embeddings.mapping import Inputs, ProcrustesOptions, map_adversarial, map_procrustes
from data_tools.errors import ArgumentParser, cli_errors


def _add_inputs(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("inputs")
    g.add_argument("--target", required=True, type=Path, help="target static embeddings NAME.npy (mapped)")
    g.add_argument("--source", required=True, type=Path, help="source space NAME.npy (fixed)")
    g.add_argument("--out", required=True, type=Path, help="output prefix: OUT.npy, OUT.map.npy, OUT.json")
    g.add_argument("--target-first-row", type=int, default=0, help="ignore target rows below this id")
    g.add_argument("--source-first-row", type=int, default=0,
                   help="ignore source rows below this id (1996 for BERT uncased: [unused*], specials, characters)")
    g.add_argument("--target-tokenizer", help="SentencePiece model or HF tokenizer for target pieces (default: "
                                               "the one in the target's sidecar)")
    g.add_argument("--source-tokenizer", help="likewise for source tokens")
    g.add_argument("--dictionary-columns", default="pieces", choices=COLUMNS,
                   help="the dictionary's first two columns hold pieces/tokens or ids")
    g.add_argument("--show-neighbours", type=int, default=0, metavar="N",
                   help="print the 10 nearest source tokens of the N most frequent target pieces")


def build_parser(prog: str = "xpt-data align-embeddings") -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=as_invoked(__doc__, prog),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="method", required=True, metavar="{procrustes,adversarial}")
    q = sub.add_parser("procrustes", help="orthogonal Procrustes on a bilingual dictionary")
    _add_inputs(q)
    q.add_argument("--dictionary", required=True, type=Path, help="TSV: target, source[, count[, probability]]")
    add_options(q.add_argument_group("procrustes"), ProcrustesOptions)
    q = sub.add_parser("adversarial", help="MUSE-style adversarial mapping + Procrustes refinement")
    _add_inputs(q)
    q.add_argument("--eval-dictionary", type=Path, help="TSV to report precision@1 on (not used for fitting)")
    add_options(q.add_argument_group("adversarial (MUSE defaults)"), AdversarialOptions)
    return p


def main(argv: list[str] | None = None, prog: str = "xpt-data align-embeddings") -> int:
    a = build_parser(prog).parse_args(argv)
    inputs = Inputs(a.target, a.source, a.target_first_row, a.source_first_row, a.target_tokenizer,
                    a.source_tokenizer)
    with cli_errors():
        out = writable_prefix(a.out)
        if a.method == "procrustes":
            sidecar = map_procrustes(inputs, a.dictionary, a.dictionary_columns,
                                     options_from_args(ProcrustesOptions, a), out, a.show_neighbours)
        else:
            sidecar = map_adversarial(inputs, a.eval_dictionary, a.dictionary_columns,
                                      options_from_args(AdversarialOptions, a), out, a.show_neighbours)
        print(sidecar.with_suffix(".npy"))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m data_tools.cli.align_embeddings"))
