"""Bilingual dictionaries for supervised alignment: a TSV of (target piece or id, source token or id
[, link count [, probability]]), e.g. the ``dictionary.tsv`` of word alignments (target piece, source token,
link count, probability). A first line whose first two fields are column names (``target``/``source``...)
is a header and skipped. Pieces are unescaped as ``dictionary.tsv`` writes them (``\\t``, ``\\n``, ``\\\\``). A
target piece may appear on several lines, once per source token.

Pairs whose piece is not in its tokenizer, or whose row carries no usable vector (unseen in the static
embeddings, or below ``--source-first-row``), are left out and counted in ``stats``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import unescape_piece

COLUMNS = ("pieces", "ids")
WEIGHTS = ("none", "count", "probability")
_HEADER_NAMES = {"target", "target_piece", "target_id", "tgt", "piece", "source", "source_token", "source_id",
                 "src", "token"}
Lookup = Callable[[str], "int | None"]


@dataclass
class Dictionary:
    target_ids: np.ndarray  # int64 [n]
    source_ids: np.ndarray  # int64 [n]
    weights: np.ndarray     # float64 [n], ones with weight "none"
    stats: dict = field(default_factory=dict)


def _resolve(value: str, lookup: Lookup | None, vocab_size: int) -> int | None:
    if lookup is None:
        try:
            i = int(value)
        except ValueError:
            return None
        return i if 0 <= i < vocab_size else None
    return lookup(value)


def _weight(fields: list[str], weight: str, where: str) -> float:
    if weight == "none":
        return 1.0
    col = 2 if weight == "count" else 3
    try:
        value = float(fields[col])
    except (IndexError, ValueError):
        raise PrepareError(f"{where}: --weights {weight} needs a number in column {col + 1}") from None
    if not value >= 0:
        raise PrepareError(f"{where}: negative or NaN {weight} {fields[col]!r}")
    return value


def read_dictionary(path: Path, target_lookup: Lookup | None, source_lookup: Lookup | None,
                    target_usable: np.ndarray, source_usable: np.ndarray, weight: str = "none") -> Dictionary:
    """``*_lookup``: piece -> id (None for unknown pieces), or None when the column holds ids. ``*_usable``:
    bool masks over ids."""
    path = Path(path)
    if not path.is_file():
        raise PrepareError(f"dictionary not found: {path}")
    if weight not in WEIGHTS:
        raise PrepareError(f"--weights must be one of {', '.join(WEIGHTS)}, got {weight!r}")
    stats = {"lines": 0, "used": 0, "target_unknown": 0, "source_unknown": 0, "target_unusable": 0,
             "source_unusable": 0, "zero_weight": 0}
    examples: dict[str, list[str]] = {}
    tgt, src, wts = [], [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            fields = line.rstrip("\r\n").split("\t")
            if n == 1 and len(fields) >= 2 and {fields[0].lower(), fields[1].lower()} <= _HEADER_NAMES:
                continue
            if not line.strip():
                continue
            if len(fields) < 2 or not fields[0] or not fields[1]:
                raise PrepareError(f"{path}:{n}: expected target<TAB>source[<TAB>count[<TAB>probability]]")
            stats["lines"] += 1
            t = _resolve(unescape_piece(fields[0]), target_lookup, len(target_usable))
            s = _resolve(unescape_piece(fields[1]), source_lookup, len(source_usable))
            w = _weight(fields, weight, f"{path}:{n}")
            problem = ("target_unknown" if t is None else "source_unknown" if s is None else
                       "target_unusable" if not target_usable[t] else "source_unusable" if not source_usable[s]
                       else "zero_weight" if w == 0 else None)
            if problem:
                stats[problem] += 1
                examples.setdefault(problem, [])
                if len(examples[problem]) < 3:
                    examples[problem].append(f"{fields[0]}\t{fields[1]}")
                continue
            tgt.append(t), src.append(s), wts.append(w)
    stats["used"] = len(tgt)
    stats["examples_left_out"] = examples
    if not tgt:
        left = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in stats.items() if k not in ("lines", "used")
                         and isinstance(v, int) and v)
        raise PrepareError(f"{path}: no usable pairs ({stats['lines']} lines" + (f": {left}" if left else "") + ")")
    return Dictionary(np.asarray(tgt, dtype=np.int64), np.asarray(src, dtype=np.int64),
                      np.asarray(wts, dtype=np.float64), stats)
