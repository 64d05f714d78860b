"""Maps of target static embeddings onto a source space, and their outputs (``xpt-data align-embeddings``):
orthogonal Procrustes on a bilingual dictionary (``map_procrustes``) or MUSE-style adversarial training +
Procrustes refinement (``map_adversarial``, ``adversarial``). Rows are ranked by the sidecar's ``counts`` (most
frequent first), or by id from ``*_first_row`` when a matrix has no counts (a model's input embeddings); the
written matrix is the affine map ``(x - x_mean) W^T * scale + y_mean`` (``alignment``) of every target row.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data_tools.typed_options import option
from data_tools.embeddings.adversarial import AdversarialOptions, fit_adversarial
from data_tools.embeddings.alignment import NORMALIZE, Space, apply_map, build_space, procrustes, rank_rows, unit
from data_tools.embeddings.bilingual_dict import WEIGHTS, Dictionary, read_dictionary
from data_tools.embeddings.embedding_files import Embeddings, atomic_write_bytes, read_embeddings, write_embeddings
from data_tools.errors import PrepareError
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
            "options": options, "diagnostics": diagnostics, "created_by": "data_tools.cli.align_embeddings"}
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


def map_procrustes(inputs: Inputs, dictionary: Path, columns: str, opts: ProcrustesOptions, out: Path,
                   neighbours: int = 0) -> Path:
    """Fit W on ``dictionary`` (its first two columns hold ``columns``: pieces or ids) and write OUT.npy,
    OUT.map.npy and OUT.json; returns the sidecar's path."""
    ld = load_inputs(inputs, opts.normalize)
    w, diagnostics = fit_procrustes(ld, load_dictionary(dictionary, columns, opts.weights, ld), opts)
    print(f"procrustes: {diagnostics['pairs']['used']} pairs, mean cosine {diagnostics['mean_cosine_before']:.4f}"
          f" -> {diagnostics['mean_cosine_after']:.4f}", file=sys.stderr)
    sidecar = write_output(out, "procrustes", ld, w, asdict(opts), diagnostics, dictionary)
    show_neighbours(ld, w, neighbours)
    return sidecar


def map_adversarial(inputs: Inputs, eval_dictionary: Path | None, columns: str, opts: AdversarialOptions, out: Path,
                    neighbours: int = 0) -> Path:
    """Fit W without a dictionary (precision@1 on ``eval_dictionary`` is reported, not used) and write the
    outputs of ``map_procrustes`` plus OUT.diagnostics.json (losses and timings); returns the sidecar's path."""
    ld = load_inputs(inputs, opts.normalize)
    gold = None
    if eval_dictionary:
        gold = gold_rows(load_dictionary(eval_dictionary, columns, "none", ld), ld)
    w, diagnostics = fit_adversarial(ld.xs, ld.ys, opts, gold, log=lambda m: print(m, file=sys.stderr))
    atomic_write_bytes(out.with_name(out.name + ".diagnostics.json"),
                       (json.dumps({"options": asdict(opts), **diagnostics}, indent=1) + "\n").encode())
    summary = {"identity_criterion": diagnostics["identity"]["criterion"], "chosen": diagnostics["chosen"],
               "criterion": [r["criterion"] for r in diagnostics["epochs"] + diagnostics["refinement"]]}
    sidecar = write_output(out, "adversarial", ld, w, asdict(opts), summary, eval_dictionary)
    show_neighbours(ld, w, neighbours)
    return sidecar
