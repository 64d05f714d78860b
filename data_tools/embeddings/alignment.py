"""Linear maps between two embedding spaces, in numpy: orthogonal Procrustes, CSLS, induced dictionaries and
MUSE's unsupervised model-selection criterion (Conneau et al. 2018, "Word translation without parallel data").

Naming: ``x`` is the space being mapped (the target language's static embeddings), ``y`` the fixed one (the
source model's space); MUSE calls them "src" and "tgt". A map is an orthogonal W [dim, dim] with x -> W x,
fitted in normalised coordinates (``Space``): each side centred and/or scaled to unit rows as asked. The
matrix written out lands in y's coordinates: ``(x - mean_x) W^T * (scale_y / scale_x) + mean_y``, so each
row keeps its norm relative to its space and the mapped rows share y's centre and average norm. For a pure
rotation (y = Q x) that is exactly Q x.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NORMALIZE = ("none", "center", "renorm", "center,renorm")
BATCH = 2048  # query rows per similarity block: [2048, n_keys] float32 stays small for n_keys ~ 100K


@dataclass
class Space:
    """The usable rows of one side, most frequent first, in fitting coordinates."""
    ids: np.ndarray      # int64 [n]: token ids (rows of the original matrix)
    vectors: np.ndarray  # float32 [n, dim]
    mean: np.ndarray     # float32 [dim]: subtracted before fitting (zeros without "center")
    scale: float         # mean row norm after centring (1.0 without "renorm")

    def position(self, vocab_size: int) -> np.ndarray:
        """id -> row of ``vectors``, -1 where the id is not usable."""
        pos = np.full(vocab_size, -1, dtype=np.int64)
        pos[self.ids] = np.arange(len(self.ids))
        return pos


def build_space(matrix: np.ndarray, ids: np.ndarray, normalize: str) -> Space:
    """``ids``: the usable rows in frequency rank order. Statistics come from those rows only."""
    if normalize not in NORMALIZE:
        raise ValueError(f"normalize must be one of {NORMALIZE}, got {normalize!r}")
    v = matrix[ids].astype(np.float32)
    mean = v.mean(0) if "center" in normalize else np.zeros(v.shape[1], dtype=np.float32)
    v = v - mean
    scale = 1.0
    if "renorm" in normalize:
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        scale = float(norms.mean())
        v = v / np.maximum(norms, 1e-8)
    return Space(np.asarray(ids, dtype=np.int64), np.ascontiguousarray(v, dtype=np.float32),
                 mean.astype(np.float32), scale)


def rank_rows(seen: np.ndarray, counts: np.ndarray | None, first_row: int = 0) -> np.ndarray:
    """Usable ids (seen, >= first_row), most frequent first (ties and count-less matrices: by id)."""
    ids = np.flatnonzero(seen & (np.arange(len(seen)) >= first_row))
    if counts is not None:
        ids = ids[np.argsort(-counts[ids], kind="stable")]
    return ids


def procrustes(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """The orthogonal W minimising sum_i w_i |W x_i - y_i|^2: W = U V^T for U S V^T = svd(Y^T diag(w) X).
    Solved in float64 so a known rotation comes back to float32 precision."""
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    if weights is not None:
        y64 = y64 * weights.astype(np.float64)[:, None]
    u, _, vt = np.linalg.svd(y64.T @ x64)
    return (u @ vt).astype(np.float32)


def apply_map(matrix: np.ndarray, w: np.ndarray, xs: Space, ys: Space) -> np.ndarray:
    """The full output matrix in y's coordinates; rows not in ``xs`` stay zero."""
    out = np.zeros(matrix.shape, dtype=np.float32)
    mapped = (matrix[xs.ids].astype(np.float64) - xs.mean) @ w.astype(np.float64).T
    out[xs.ids] = mapped * (ys.scale / xs.scale) + ys.mean
    return out


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-8)


def mean_topk_similarity(queries: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
    """r(q) = mean cosine of q's k nearest keys (rows unit-norm): CSLS's hubness penalty."""
    k = min(k, len(keys))
    out = np.empty(len(queries), dtype=np.float32)
    for s in range(0, len(queries), BATCH):
        sims = queries[s:s + BATCH] @ keys.T
        out[s:s + BATCH] = np.partition(sims, -k, axis=1)[:, -k:].mean(1)
    return out


def csls_argmax(queries: np.ndarray, keys: np.ndarray, r_keys: np.ndarray) -> np.ndarray:
    """Best key per query by CSLS(q, k) = 2 cos(q, k) - r(q) - r(k); r(q) is constant per query."""
    best = np.empty(len(queries), dtype=np.int64)
    for s in range(0, len(queries), BATCH):
        best[s:s + BATCH] = np.argmax(2 * (queries[s:s + BATCH] @ keys.T) - r_keys[None, :], axis=1)
    return best


def induce_dictionary(xm: np.ndarray, y: np.ndarray, k: int = 10, mutual: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (rows of xm, rows of y) by CSLS nearest neighbour x -> y; with ``mutual`` only pairs that are also
    nearest y -> x (MUSE's "S2T&T2S"). Rows must be unit-norm."""
    r_x, r_y = mean_topk_similarity(xm, y, k), mean_topk_similarity(y, xm, k)
    fwd = csls_argmax(xm, y, r_y)
    rows = np.arange(len(xm))
    if not mutual:
        return rows, fwd
    bwd = csls_argmax(y, xm, r_x)
    keep = bwd[fwd] == rows
    return rows[keep], fwd[keep]


def mean_cosine_criterion(xm: np.ndarray, y: np.ndarray, k: int = 10) -> float:
    """MUSE's unsupervised criterion: mean cosine of the CSLS x -> y dictionary (rows unit-norm; pass the
    most frequent rows of each side, MUSE uses 10,000)."""
    i, j = induce_dictionary(xm, y, k, mutual=False)
    return float((xm[i] * y[j]).sum(1).mean())


def refine(xs: Space, ys: Space, w: np.ndarray, max_rank: int, k: int = 10) -> tuple[np.ndarray, int]:
    """One Procrustes refinement step: the mutual-CSLS dictionary of the ``max_rank`` most frequent rows of
    each side under ``w``, then Procrustes on it. Returns the new W and the dictionary size."""
    xm = unit(xs.vectors[:max_rank] @ w.T)
    y = unit(ys.vectors[:max_rank])
    i, j = induce_dictionary(xm, y, k, mutual=True)
    if len(i) == 0:
        return w, 0
    return procrustes(xs.vectors[i], ys.vectors[j]), len(i)


def precision_at_1(xs: Space, ys: Space, w: np.ndarray, gold: dict[int, set[int]], k: int = 10) -> dict:
    """Word-translation precision@1 of x -> y on a gold dictionary {x row: {y rows}} by nearest neighbour and
    by CSLS, searching all usable y rows."""
    if not gold:
        return {"queries": 0}
    queries = np.asarray(sorted(gold), dtype=np.int64)
    xm_all, y = unit(xs.vectors @ w.T), unit(ys.vectors)
    q = xm_all[queries]
    nn = np.concatenate([np.argmax(q[s:s + BATCH] @ y.T, axis=1) for s in range(0, len(q), BATCH)])
    csls = csls_argmax(q, y, mean_topk_similarity(y, xm_all, k))
    hit = lambda pred: float(np.mean([p in gold[int(r)] for r, p in zip(queries, pred)]))
    return {"queries": len(queries), "nn": hit(nn), "csls": hit(csls)}
