"""Map target-language static embeddings onto a source space (source static embeddings, or the source model's
input embeddings from ``data_tools.source_embeddings``): supervised by a bilingual dictionary (orthogonal
Procrustes) or unsupervised (MUSE-style adversarial training + Procrustes refinement, data_tools/adversarial.py).

    python -m data_tools.align_embeddings procrustes --target emb/uk.npy --source emb/minilm.npy \\
        --dictionary dictionary.tsv --out emb/uk_on_minilm [--weights count]
    python -m data_tools.align_embeddings adversarial --target emb/uk.npy --source emb/minilm.npy \\
        --out emb/uk_adv --source-first-row 1996 --epochs 3 --iterations 500 --dis-hidden 512

Writes ``OUT.npy`` (float32 [target vocab, dim], row = target token id, in the source's coordinates; rows of
unseen target pieces stay zero and are listed in ``unseen_ids``), ``OUT.map.npy`` (W [dim, dim]) and the
``OUT.json`` sidecar (data_tools/embedding_files.py) with the inputs' sha256, the affine map
(``(x - x_mean) W^T * scale + y_mean``, data_tools/alignment.py), options and fit diagnostics: dictionary pairs
used and left out and mean cosine before/after (procrustes), criterion per epoch and the chosen stage
(adversarial; also ``OUT.diagnostics.json`` with losses and timings).

Rows are ranked by the sidecar's ``counts`` (most frequent first); matrices without counts (a model's input
embeddings) by id, starting at ``--source-first-row``/``--target-first-row``.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data_tools.adversarial import AdversarialOptions, fit_adversarial
from data_tools.alignment import NORMALIZE, Space, apply_map, build_space, procrustes, rank_rows, unit
from data_tools.bilingual_dict import COLUMNS, WEIGHTS, Dictionary, read_dictionary
from data_tools.embedding_files import Embeddings, atomic_write_bytes, output_prefix, read_embeddings, write_embeddings
from data_tools.errors import PrepareError, cli_errors
from data_tools.cli_options import add_options, option, options_from_args
from data_tools.piece_tokenizers import load_tokenizer, open_tokenizer, sha256_file


@dataclass(frozen=True)
class Inputs:
    """The two spaces and how to read their rows."""
    target: Path
    source: Path
    target_first_row: int = 0
    source_first_row: int = 0
    target_tokenizer: str | None = None
    source_tokenizer: str | None = None


@dataclass(frozen=True)
class ProcrustesOptions:
    normalize: str = option("center,renorm", "fit in centred and/or unit-length coordinates", choices=NORMALIZE)
    weights: str = option("none", "weight pairs by the dictionary's link count (column 3) or probability "
                          "(column 4)", choices=WEIGHTS)


@dataclass
class Loaded:
    target: Embeddings
    source: Embeddings
    xs: Space
    ys: Space
    target_tok: object | None
    source_tok: object | None


def load_inputs(inp: Inputs, normalize: str) -> Loaded:
    target, source = read_embeddings(inp.target), read_embeddings(inp.source)
    if target.matrix.shape[1] != source.matrix.shape[1]:
        raise PrepareError(f"dimension mismatch: target {target.path} has dim {target.matrix.shape[1]}, source "
                           f"{source.path} has dim {source.matrix.shape[1]} (train the static embeddings with "
                           f"--dim {source.matrix.shape[1]})")
    xs = build_space(target.matrix, rank_rows(target.seen, target.counts, inp.target_first_row), normalize)
    ys = build_space(source.matrix, rank_rows(source.seen, source.counts, inp.source_first_row), normalize)
    for name, space, emb in (("target", xs, target), ("source", ys, source)):
        if len(space.ids) < 2:
            raise PrepareError(f"{emb.path}: fewer than 2 usable rows ({name})")
    return Loaded(target, source, xs, ys, _tokenizer(target, inp.target_tokenizer),
                  _tokenizer(source, inp.source_tokenizer))


def _tokenizer(emb: Embeddings, override: str | None):
    if override:
        return open_tokenizer(override)
    return load_tokenizer(emb.meta["tokenizer"]) if emb.meta.get("tokenizer") else None


def load_dictionary(path: Path, columns: str, weights: str, ld: Loaded) -> Dictionary:
    lookups = []
    for side, tok in (("target", ld.target_tok), ("source", ld.source_tok)):
        if columns == "ids":
            lookups.append(None)
        elif tok is None:
            raise PrepareError(f"the {side} embeddings record no tokenizer to look pieces up: pass "
                               f"--{side}-tokenizer or --dictionary-columns ids")
        else:
            lookups.append(tok.piece_to_id)
    usable_x = np.zeros(len(ld.target.matrix), dtype=bool)
    usable_x[ld.xs.ids] = True
    usable_y = np.zeros(len(ld.source.matrix), dtype=bool)
    usable_y[ld.ys.ids] = True
    return read_dictionary(path, lookups[0], lookups[1], usable_x, usable_y, weights)


def fit_procrustes(ld: Loaded, d: Dictionary, opts: ProcrustesOptions) -> tuple[np.ndarray, dict]:
    px, py = ld.xs.position(len(ld.target.matrix)), ld.ys.position(len(ld.source.matrix))
    x, y = ld.xs.vectors[px[d.target_ids]], ld.ys.vectors[py[d.source_ids]]  # [pairs, dim], fitting coordinates
    w = procrustes(x, y, None if opts.weights == "none" else d.weights)
    cosine = lambda m: float((unit(x @ m.T) * unit(y)).sum(1).mean())
    return w, {"pairs": d.stats, "mean_cosine_before": cosine(np.eye(len(w), dtype=np.float32)),
               "mean_cosine_after": cosine(w), "cosine_space": opts.normalize}


def gold_rows(d: Dictionary, ld: Loaded) -> dict[int, set[int]]:
    """An evaluation dictionary as {target row in xs: {source rows in ys}}."""
    px, py = ld.xs.position(len(ld.target.matrix)), ld.ys.position(len(ld.source.matrix))
    gold: dict[int, set[int]] = {}
    for t, s in zip(d.target_ids.tolist(), d.source_ids.tolist()):
        gold.setdefault(int(px[t]), set()).add(int(py[s]))
    return gold


def write_output(out: Path, kind: str, ld: Loaded, w: np.ndarray, options: dict, diagnostics: dict,
                 dictionary: Path | None) -> Path:
    matrix = apply_map(ld.target.matrix, w, ld.xs, ld.ys)
    unseen = np.ones(len(matrix), dtype=bool)
    unseen[ld.xs.ids] = False
    inputs = {"target": ld.target.describe(), "source": ld.source.describe()}
    if dictionary is not None:
        inputs["dictionary"] = {"path": str(dictionary.resolve()), "sha256": sha256_file(dictionary)}
    meta = {"kind": kind, "tokenizer": ld.target.meta.get("tokenizer"),
            "source_tokenizer": ld.source.meta.get("tokenizer"), "unseen_rows": "zeros",
            "unseen_ids": np.flatnonzero(unseen).tolist(), "inputs": inputs,
            "map": {"normalize": options["normalize"], "x_mean": ld.xs.mean.tolist(), "y_mean": ld.ys.mean.tolist(),
                    "scale": ld.ys.scale / ld.xs.scale},
            "options": options, "diagnostics": diagnostics, "created_by": "data_tools.align_embeddings"}
    if ld.target.counts is not None:
        meta["counts"] = ld.target.counts.tolist()
    return write_embeddings(out, matrix, meta, extra={"map": w})


def show_neighbours(ld: Loaded, w: np.ndarray, n: int, k: int = 10) -> None:
    """The ``k`` nearest source tokens (cosine) of the ``n`` most frequent target pieces, on stderr."""
    if not n or ld.target_tok is None or ld.source_tok is None:
        return
    xm, y = unit(ld.xs.vectors[:n] @ w.T), unit(ld.ys.vectors)
    for row, sims in enumerate(xm @ y.T):
        top = np.argsort(-sims, kind="stable")[:k]
        words = " ".join(f"{ld.source_tok.id_to_piece(ld.ys.ids[j])}({sims[j]:.2f})" for j in top)
        print(f"  {ld.target_tok.id_to_piece(ld.xs.ids[row])}: {words}", file=sys.stderr)


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m data_tools.align_embeddings", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="method", required=True, metavar="{procrustes,adversarial}")
    q = sub.add_parser("procrustes", help="orthogonal Procrustes on a bilingual dictionary")
    _add_inputs(q)
    q.add_argument("--dictionary", required=True, type=Path, help="TSV: target, source[, count[, probability]]")
    add_options(q, ProcrustesOptions, "procrustes")
    q = sub.add_parser("adversarial", help="MUSE-style adversarial mapping + Procrustes refinement")
    _add_inputs(q)
    q.add_argument("--eval-dictionary", type=Path, help="TSV to report precision@1 on (not used for fitting)")
    add_options(q, AdversarialOptions, "adversarial (MUSE defaults)")
    return p


def _inputs(a: argparse.Namespace) -> Inputs:
    return Inputs(a.target, a.source, a.target_first_row, a.source_first_row, a.target_tokenizer, a.source_tokenizer)


def run(a: argparse.Namespace) -> Path:
    out = output_prefix(a.out)
    if a.method == "procrustes":
        opts = options_from_args(ProcrustesOptions, a)
        ld = load_inputs(_inputs(a), opts.normalize)
        w, diagnostics = fit_procrustes(ld, load_dictionary(a.dictionary, a.dictionary_columns, opts.weights, ld),
                                        opts)
        print(f"procrustes: {diagnostics['pairs']['used']} pairs, mean cosine {diagnostics['mean_cosine_before']:.4f}"
              f" -> {diagnostics['mean_cosine_after']:.4f}", file=sys.stderr)
        sidecar = write_output(out, "procrustes", ld, w, asdict(opts), diagnostics, a.dictionary)
    else:
        opts = options_from_args(AdversarialOptions, a)
        ld = load_inputs(_inputs(a), opts.normalize)
        gold = None
        if a.eval_dictionary:
            gold = gold_rows(load_dictionary(a.eval_dictionary, a.dictionary_columns, "none", ld), ld)
        w, diagnostics = fit_adversarial(ld.xs, ld.ys, opts, gold, log=lambda m: print(m, file=sys.stderr))
        atomic_write_bytes(out.with_name(out.name + ".diagnostics.json"),
                           (json.dumps({"options": asdict(opts), **diagnostics}, indent=1) + "\n").encode())
        summary = {"identity_criterion": diagnostics["identity"]["criterion"], "chosen": diagnostics["chosen"],
                   "criterion": [r["criterion"] for r in diagnostics["epochs"] + diagnostics["refinement"]]}
        sidecar = write_output(out, "adversarial", ld, w, asdict(opts), summary, a.eval_dictionary)
    show_neighbours(ld, w, a.show_neighbours)
    return sidecar


def main(argv: list[str] | None = None) -> None:
    a = build_parser().parse_args(argv)
    with cli_errors():
        print(run(a).with_suffix(".npy"))


if __name__ == "__main__":
    main()
