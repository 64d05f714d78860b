"""Blending corpora into one training stream (``data.mix``): which corpus each packed row comes from, and where.

``data.train_shards`` (the corpus named ``train``) and every ``data.mix`` entry are each their own token stream
(``xpt_ds.data.mlm.TokenStream``: its own epochs, shard order and shuffle), packed into rows as one corpus is. Row
i of the training stream, the global sequence index every rank's micro-batch is cut from, comes from the corpus
``schedule.corpus(i)``: a fixed pattern of ``PERIOD`` slots, repeated, in which a corpus of weight w holds
``round(w * PERIOD)`` slots (largest remainders), spread evenly through the period by smooth weighted round robin.
So every window of rows holds each corpus in its share to within a row or two, whatever the batch or the number of
ranks, and the rows of corpus c before row i are counted in O(1): that corpus reads its own stream at that count.

The loader's state stays one sequence index, plus each corpus's position, so a resume with other weights (or a
corpus added) continues every corpus where it stopped instead of where the new pattern would have put it:
``offsets`` are what each corpus's position is ahead of the pattern's count, 0 for a run that kept its weights.
"""
from __future__ import annotations

import numpy as np

from xpt_ds.config.job import MIX_PERIOD as PERIOD  # slots of the repeating pattern: weights resolve to 1/PERIOD
MAIN = "train"  # data.train_shards' name among the corpora


def quotas(weights: list[float]) -> list[int]:
    """Slots per period of each weight (summing to 1): ``w * PERIOD`` rounded by largest remainders, and at least
    one each (taken from the largest) for weights of at least 1/PERIOD that rounding left without."""
    exact = [w * PERIOD for w in weights]
    out = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda c: (-(exact[c] - out[c]), c))
    for c in by_remainder[:PERIOD - sum(out)]:
        out[c] += 1
    for c in [c for c, q in enumerate(out) if q == 0]:
        out[out.index(max(out))] -= 1
        out[c] = 1
    return out


class Schedule:
    """Which corpus row i comes from (``corpus``), and how many rows of each corpus come before it (``before``)."""

    def __init__(self, weights: list[float]):
        self.quota = np.array(quotas(weights), np.int64)
        if (self.quota == 0).any():
            raise ValueError(f"weights {weights} give a corpus no row in {PERIOD}")
        current, pattern = [0] * len(weights), np.empty(PERIOD, np.int64)
        for s in range(PERIOD):  # smooth weighted round robin: each slot to the corpus furthest behind its share
            current = [x + q for x, q in zip(current, self.quota.tolist())]
            c = max(range(len(current)), key=lambda k: (current[k], -k))
            pattern[s], current[c] = c, current[c] - PERIOD
        self.pattern = pattern
        self.prefix = np.zeros((len(weights), PERIOD + 1), np.int64)  # [c, s]: slots of c among the first s
        self.prefix[:, 1:] = np.cumsum(pattern[None, :] == np.arange(len(weights))[:, None], axis=1)

    def corpus(self, i: int) -> int:
        return int(self.pattern[i % PERIOD])

    def before(self, i: int) -> np.ndarray:
        """int64 [corpora]: rows of each corpus among rows ``0 .. i - 1``."""
        return (i // PERIOD) * self.quota + self.prefix[:, i % PERIOD]


class Mixture:
    """The corpora of one training stream, ``data.train_shards``' first: names, token streams and the schedule."""

    def __init__(self, names: list[str], streams: list, weights: list[float]):
        self.names, self.streams, self.weights = list(names), list(streams), list(weights)
        self.schedule = Schedule(self.weights)

    def locate(self, i: int, offsets: list[int]) -> tuple[object, int]:
        """(the token stream, the row of it) that global row ``i`` reads."""
        c = self.schedule.corpus(i)
        return self.streams[c], int(self.schedule.before(i)[c]) + offsets[c]

    def positions(self, sequences: int, offsets: list[int]) -> dict[str, int]:
        """Name -> rows of that corpus read before global row ``sequences``: the loader's state."""
        return {n: int(x) + o for n, x, o in zip(self.names, self.schedule.before(sequences), offsets)}

    def offsets(self, sequences: int, positions: dict[str, int]) -> list[int]:
        """The offsets that make each corpus continue at its saved position from global row ``sequences``; a
        corpus the state does not name (one added since) starts at its beginning."""
        return [int(positions.get(n, 0)) - int(x) for n, x in zip(self.names, self.schedule.before(sequences))]

    def epochs(self, sequences: int, offsets: list[int], body: int) -> dict[str, int]:
        """Name -> the epoch of that corpus that global row ``sequences`` is in."""
        return {n: p * body // s.epoch_tokens for (n, p), s in zip(self.positions(sequences, offsets).items(),
                                                                    self.streams)}
