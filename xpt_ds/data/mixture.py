"""Blending corpora into one training stream (``data.mix``): which corpus each packed row comes from, and where.

``data.train_shards`` (the corpus named ``train``) and every ``data.mix`` entry are each their own token stream
(``xpt_ds.data.mlm.TokenStream``: its own epochs, shard order and shuffle), packed into rows as one corpus is. Row
i of the training stream, the global sequence index every rank's micro-batch is cut from, comes from the corpus
``schedule.corpus(i)``: a fixed pattern of ``PERIOD`` slots, repeated, in which a corpus of weight w holds
``round(w * PERIOD)`` slots (largest remainders), spread evenly through the period by smooth weighted round robin.
So every window of rows holds each corpus in its share to within a row or two, whatever the batch or the number of
ranks, and the rows of corpus c before row i are counted in O(1): that corpus reads its own stream at that count.

The loader's state stays one sequence index, plus each corpus's position, so a resume with other weights (or a
corpus added), or a phase with its own weights (``phases[i].mix``), continues every corpus where it stopped instead
of where the new pattern would have put it: ``Mixture.shift`` is what each corpus's position is ahead of the
pattern's count, 0 for a run that kept its weights. The slots and shifts reach the DataLoader workers with the
sequence index (``xpt_ds.data.workers``), so a phase's new weights need no new worker processes.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from xpt_ds.config.job import MIX_PERIOD as PERIOD  # slots of the repeating pattern: weights resolve to 1/PERIOD
MAIN = "train"  # data.train_shards' name among the corpora


def quotas(weights: list[float]) -> tuple[int, ...]:
    """Slots per period of each weight (summing to 1): ``w * PERIOD`` rounded by largest remainders, and at least
    one for each positive weight (taken from the largest) that rounding left without; a weight of 0 gets none."""
    exact = [w * PERIOD for w in weights]
    out = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda c: (-(exact[c] - out[c]), c))
    for c in by_remainder[:PERIOD - sum(out)]:
        out[c] += 1
    for c in [c for c, q in enumerate(out) if q == 0 and weights[c] > 0]:
        out[out.index(max(out))] -= 1
        out[c] = 1
    return tuple(out)


@lru_cache(maxsize=8)
def schedule(quota: tuple[int, ...]) -> Schedule:
    """The schedule of ``quota`` slots per corpus, built once per process."""
    return Schedule(quota)


class Schedule:
    """Which corpus row i comes from (``corpus``), and how many rows of each corpus come before it (``before``),
    for ``quota`` slots of each corpus in every ``PERIOD`` rows."""

    def __init__(self, quota: tuple[int, ...]):
        if sum(quota) != PERIOD or min(quota) < 0:
            raise ValueError(f"slots {quota} do not share a period of {PERIOD}")
        self.quota = np.array(quota, np.int64)
        n, current, pattern = len(quota), [0] * len(quota), np.empty(PERIOD, np.int64)
        for s in range(PERIOD):  # smooth weighted round robin: each slot to the corpus furthest behind its share
            current = [x + q for x, q in zip(current, quota)]
            c = max(range(n), key=lambda k: (current[k], -k))
            pattern[s], current[c] = c, current[c] - PERIOD
        self.pattern = pattern
        self.prefix = np.zeros((n, PERIOD + 1), np.int64)  # [c, s]: slots of c among the first s
        self.prefix[:, 1:] = np.cumsum(pattern[None, :] == np.arange(n)[:, None], axis=1)

    def corpus(self, i: int) -> int:
        return int(self.pattern[i % PERIOD])

    def before(self, i: int) -> np.ndarray:
        """int64 [corpora]: rows of each corpus among rows ``0 .. i - 1``."""
        return (i // PERIOD) * self.quota + self.prefix[:, i % PERIOD]

    def row(self, i: int) -> tuple[int, int]:
        """(the corpus of row i, the rows of that corpus before it): the loader's per-row lookup."""
        c, s = int(self.pattern[i % PERIOD]), i % PERIOD
        return c, (i // PERIOD) * int(self.quota[c]) + int(self.prefix[c, s])


class Mixture:
    """The corpora of one training stream, ``data.train_shards``' first (names, token streams), the schedule they
    are blended by and each corpus's offset: its row is ``schedule.before(i)[c] + shift[c]``."""

    def __init__(self, names: list[str], streams: list, weights: list[float]):
        self.names, self.streams = list(names), list(streams)
        self.shift = [0] * len(self.names)
        self._use_quota(quotas(weights))

    def _use_quota(self, quota: tuple[int, ...]) -> None:
        self.quota, self.schedule = tuple(quota), schedule(tuple(quota))

    def blend(self) -> list[int]:
        """What a DataLoader worker needs besides the sequence: each corpus's offset, then its slots."""
        return [*self.shift, *self.quota]

    def use(self, blend: list[int]) -> None:
        """Take ``blend`` (a worker's copy of the mixture: what the training process set)."""
        n = len(self.names)
        self.shift = list(blend[:n])
        self._use_quota(tuple(blend[n:]))

    def locate(self, i: int) -> tuple[object, int]:
        """(the token stream, the row of it) that global row ``i`` reads."""
        c, before = self.schedule.row(i)
        return self.streams[c], before + self.shift[c]

    def positions(self, sequences: int) -> dict[str, int]:
        """Name -> rows of that corpus read before global row ``sequences``: the loader's state."""
        return {n: int(x) + o for n, x, o in zip(self.names, self.schedule.before(sequences), self.shift)}

    def restore(self, sequences: int, positions: dict[str, int]) -> None:
        """Each corpus continues at its saved position from global row ``sequences``; a corpus the state does not
        name (one added since) starts at its beginning."""
        self.shift = [int(positions.get(n, 0)) - int(x) for n, x in zip(self.names, self.schedule.before(sequences))]

    def reweight(self, sequences: int, weights: list[float]) -> bool:
        """Blend at ``weights`` from global row ``sequences`` on, each corpus continuing at its row; whether the
        slots changed."""
        quota = quotas(weights)
        if quota == self.quota:
            return False
        positions = self.positions(sequences)
        self._use_quota(quota)
        self.restore(sequences, positions)
        return True

    def epochs(self, sequences: int, body: int) -> dict[str, int]:
        """Name -> the epoch of that corpus that global row ``sequences`` is in."""
        return {n: p * body // s.epoch_tokens for (n, p), s in zip(self.positions(sequences).items(), self.streams)}

def shares(mixture: Mixture, epochs: bool = False) -> str:
    """Each corpus's share of the rows, for the log (``epochs``: and its tokens an epoch)."""
    return ", ".join(f"{'data.train_shards' if n == MAIN else n} {q / PERIOD:.2%}"
                     + (f" ({s.epoch_tokens:,} tokens an epoch)" if epochs else "")
                     for n, q, s in zip(mixture.names, mixture.quota, mixture.streams))
