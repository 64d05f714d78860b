"""Downstream scores as 002 Table 3 reports them: accuracy and F1, Pearson/Spearman, entity-level F1; and
KLUE-RE's micro F1 without ``no_relation`` and AUPRC (001).

Pure Python + numpy, no scikit-learn/scipy/seqeval: the definitions are short and the tests pin them
against hand-computed values.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np


def accuracy(gold: list[int], pred: list[int]) -> float:
    return sum(g == p for g, p in zip(gold, pred)) / len(gold)


def _f1(tp: int, n_pred: int, n_gold: int) -> float:
    return 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0


def class_f1(gold: list[int], pred: list[int], cls: int) -> float:
    tp = sum(g == p == cls for g, p in zip(gold, pred))
    return _f1(tp, pred.count(cls), gold.count(cls))


def classification_metrics(gold: list[int], pred: list[int], num_labels: int) -> dict[str, float]:
    """accuracy, macro_f1 (over the classes that occur in gold or pred, as scikit-learn does), and for two
    classes binary_f1 of class id 1 (the second label in sorted order: ``1`` of 0/1, ``yes`` of no/yes)."""
    present = sorted(set(gold) | set(pred))
    out = {"accuracy": accuracy(gold, pred),
           "macro_f1": sum(class_f1(gold, pred, c) for c in present) / len(present)}
    if num_labels == 2:
        out["binary_f1"] = class_f1(gold, pred, 1)
    return out


def majority_baseline(gold: list[int]) -> tuple[int, float]:
    """The class most frequent in ``gold`` and the accuracy of always predicting it (ties: smallest id). On the
    test labels: the best any one-class prediction scores, the bar a model must pass to have learned more."""
    counts = Counter(gold)
    best = min(counts, key=lambda c: (-counts[c], c))
    return best, counts[best] / len(gold)


def train_majority(train: list[int], test: list[int]) -> tuple[int, float]:
    """The class most frequent in the training labels and its accuracy on ``test``: the classic majority-class
    baseline, a classifier that learned only the training label distribution (below ``majority_baseline`` of
    the test labels when the two sets' majorities differ)."""
    label, _ = majority_baseline(train)
    return label, sum(g == label for g in test) / len(test)


def average_ranks(x) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they span ([10, 20, 20, 30] -> [1, 2.5, 2.5, 4])."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def pearson(x, y) -> float:
    """NaN when either side is constant (the correlation is undefined)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    denom = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / denom if denom > 0 else math.nan


def spearman(x, y) -> float:
    return pearson(average_ranks(x), average_ranks(y))


def regression_metrics(gold: list[float], pred: list[float]) -> dict[str, float]:
    return {"pearson": pearson(gold, pred), "spearman": spearman(gold, pred)}


def entity_spans(tags: list[str]) -> set[tuple[str, int, int]]:
    """(type, start, end) spans of IOB2 tags, end exclusive, with seqeval's default (conlleval) reading:
    an ``I-X`` after ``O`` or after another type starts a new entity, and ``B-X`` always does."""
    spans, start, kind = set(), None, None
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, typ = tag.partition("-")
        continues = prefix == "I" and start is not None and typ == kind
        if start is not None and not continues:
            spans.add((kind, start, i))
            start = None
        if prefix in ("B", "I") and not continues:
            start, kind = i, typ
    return spans


def entity_metrics(gold: list[list[str]], pred: list[list[str]]) -> dict[str, float]:
    """Micro precision/recall/F1 over exact (type, start, end) matches, summed over sentences."""
    tp = n_gold = n_pred = 0
    for g, p in zip(gold, pred):
        gs, ps = entity_spans(g), entity_spans(p)
        tp, n_gold, n_pred = tp + len(gs & ps), n_gold + len(gs), n_pred + len(ps)
    return {"entity_precision": tp / n_pred if n_pred else 0.0, "entity_recall": tp / n_gold if n_gold else 0.0,
            "entity_f1": _f1(tp, n_pred, n_gold)}


def pr_curve_area(positive: np.ndarray, scores: np.ndarray) -> float:
    """Area under one class's precision-recall curve as KLUE-RE computes it (klue-baseline's klue_re_auprc:
    scikit-learn's ``auc(recall, precision)`` over ``precision_recall_curve``): one point per distinct score,
    highest first (ties enter together), plus (recall 0, precision 1); trapezoids between them."""
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], positive[order].astype(np.float64)
    last = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]  # the last index of each distinct score
    tps = np.cumsum(y)[last]
    precision = tps / (last + 1)
    recall = tps / tps[-1]
    r, p = np.r_[0.0, recall], np.r_[1.0, precision]
    return float(np.sum(np.diff(r) * (p[1:] + p[:-1]) / 2))


def relation_metrics(gold: list[int], probs, no_relation: int | None) -> dict[str, float]:
    """KLUE-RE's scores (×100 in its tables): ``micro_f1`` over every class but ``no_relation`` (its id, None if
    the labels have none: then every class counts), predictions = argmax; ``auprc``, the per-class
    one-vs-rest precision-recall area over the probabilities (``pr_curve_area``), averaged over the classes
    that occur in ``gold`` (KLUE's dev set has all 30; a class with no gold example has no recall);
    ``accuracy`` over all classes."""
    probs = np.asarray(probs, dtype=np.float64)
    g = np.asarray(gold)
    pred = probs.argmax(1)
    counted = (lambda x: x != no_relation) if no_relation is not None else (lambda x: np.ones(len(x), bool))
    tp = int(np.sum((pred == g) & counted(g)))
    f1 = _f1(tp, int(np.sum(counted(pred))), int(np.sum(counted(g))))
    areas = [pr_curve_area(g == c, probs[:, c]) for c in sorted(set(g.tolist()))]
    return {"micro_f1": f1, "auprc": float(np.mean(areas)), "accuracy": float(np.mean(pred == g))}


def summarize(per_seed: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """mean ± sample std (ddof=1; 0 for one seed) of every metric, as 002 Table 3 reports its 10 seeds."""
    out = {}
    for name in per_seed[0]:
        vals = np.array([m[name] for m in per_seed], dtype=np.float64)
        std = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        out[name] = {"mean": float(vals.mean()), "std": std, "n": len(vals)}
    return out
