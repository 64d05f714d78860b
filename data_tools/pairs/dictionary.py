"""A bilingual dictionary induced from subword alignments: ``dictionary.tsv`` next to the parallel manifest,
for a later embedding initialisation (WECHSEL-style: a target piece starts from the source embeddings of
the source tokens it is aligned to, weighted by ``p_source_given_target``).

``links`` counts a (target piece, source token) pair once per t2s link and once per s2t link (the two
Viterbi directions, unsymmetrised, so a link both directions agree on counts twice);
``p_source_given_target`` is ``links`` over all links of that target piece, including pairs under the
threshold. Rows: target id ascending, then links descending, then source id ascending.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from data_tools.pipeline.shards import atomic_write_text
from data_tools.piece_tokenizers import escape_piece

COLUMNS = ("target_piece", "source_token", "links", "p_source_given_target", "target_id", "source_id")


def count_links(src: Sequence[np.ndarray], tgt: Sequence[np.ndarray], s2t: Sequence[np.ndarray],
                t2s: Sequence[np.ndarray], source_vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(target ids, source ids, link counts) of every linked pair, sorted by target id then source id."""
    tgt_ids, src_ids = [], []
    for s, t, a, b in zip(src, tgt, s2t, t2s):
        linked = b >= 0
        tgt_ids += [t[linked], t[a[a >= 0]]]
        src_ids += [s[b[linked]], s[a >= 0]]
    if not tgt_ids:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys = np.concatenate(tgt_ids).astype(np.int64) * source_vocab + np.concatenate(src_ids).astype(np.int64)
    keys, counts = np.unique(keys, return_counts=True)
    return keys // source_vocab, keys % source_vocab, counts


def write_dictionary(path: Path, counts: tuple[np.ndarray, np.ndarray, np.ndarray], min_count: int,
                     target_pieces: Callable[[np.ndarray], list[str]],
                     source_pieces: Callable[[np.ndarray], list[str]]) -> dict:
    """Write the pairs with at least ``min_count`` links (piece strings: tab, newline and backslash escaped)."""
    tgt, src, links = counts
    per_target = np.bincount(tgt, links, minlength=int(tgt.max(initial=-1)) + 1) if len(tgt) else np.zeros(0)
    keep = np.flatnonzero(links >= min_count)
    keep = keep[np.lexsort((src[keep], -links[keep], tgt[keep]))]
    tgt, src, links = tgt[keep], src[keep], links[keep]
    prob = links / per_target[tgt] if len(keep) else np.zeros(0)
    rows = ["\t".join(COLUMNS)]
    for tp, sp, n, p, t, s in zip(target_pieces(tgt), source_pieces(src), links.tolist(), prob.tolist(),
                                  tgt.tolist(), src.tolist()):
        rows.append(f"{escape_piece(tp)}\t{escape_piece(sp)}\t{n}\t{p:.6f}\t{t}\t{s}")
    atomic_write_text(path, "\n".join(rows) + "\n")
    return {"file": path.name, "min_count": min_count, "entries": len(keep),
            "target_pieces": len(np.unique(tgt)), "links_kept": int(links.sum())}


def read_dictionary(path: Path) -> list[dict]:
    """The rows of a dictionary.tsv as dicts (ids and counts as int, the probability as float; pieces as written,
    i.e. still escaped)."""
    lines = Path(path).read_text(encoding="utf-8").rstrip("\n").split("\n")
    rows = []
    for line in lines[1:]:
        tp, sp, n, p, t, s = line.split("\t")
        rows.append({"target_piece": tp, "source_token": sp, "links": int(n), "p_source_given_target": float(p),
                     "target_id": int(t), "source_id": int(s)})
    return rows
