"""The sentences the clean stage has kept so far, as 16-byte digests, for its corpus-wide exact dedupe.

A Python set of ``bytes`` costs about 91 bytes a digest (the object, its hash slot, the set's spare room): 13.7 GB
for 150M sentences, and a lookup or insert from Python for every sentence. Here the digests are sorted numpy arrays,
16 bytes a digest: each batch's new digests become an array of their own, merged whenever the newer of two reaches
half the older's size, as a log-structured merge does: at most about log2(n / batch) arrays, each digest copied O(log n)
times in all. The largest merge briefly holds both inputs and half of its output, about 24 bytes a digest at that
peak. No step handles a digest from Python: a batch is one ``bytes`` of concatenated digests, which the workers hash
(``digests``), and its answers one boolean array.

Each array is a pair, the digests' first and last 8 bytes as unsigned integers, sorted by the first, so a lookup
compares integers. Digests that share their first 8 bytes (expected n^2 / 2^65 pairs: 6e-4 at 150M) sit side by
side, and a lookup that matches the first half but not the second looks through all of them: the answer is exact.

A bitmap over the first half's top bits (``Marks``, 1-4 bytes a digest) turns most new digests away before any
binary search. A batch keeps its own order: of two equal sentences in it, the first is new.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

import numpy as np

MARK_BITS = 23  # the smallest bitmap: 2**23 bits, 1 MiB
SLICE = 1 << 20  # digests a step over a whole run takes at a time: its temporaries stay at a few MB
DIGEST = 16  # bytes a sentence's digest takes

Run = tuple[np.ndarray, np.ndarray]  # (first 8 bytes, last 8 bytes) of each digest, sorted by the first


def digest(sentence: str) -> bytes:
    """A sentence's 16-byte digest: what the dedupe compares."""
    return hashlib.blake2b(sentence.encode(), digest_size=DIGEST).digest()


def digests(sentences: Iterable[str]) -> bytes:
    """The digests of ``sentences``, concatenated: one batch for ``SeenSentences.first_seen``."""
    return b"".join(map(digest, sentences))


class SeenSentences:
    """Digests added so far; ``first_seen`` answers and adds a batch in order."""

    def __init__(self):
        self.runs: list[Run] = []  # each at least twice the size of the next
        self.marks = Marks()

    def __len__(self) -> int:
        return sum(len(first) for first, _ in self.runs)

    def first_seen(self, batch: bytes) -> np.ndarray:
        """For each digest of ``batch`` (16 bytes each, concatenated), in order, whether it is new (neither added
        before nor earlier in the batch), adding the new ones: a boolean array."""
        first, last = _halves(batch)
        order = np.lexsort((last, first))  # stable: equal digests keep their batch order, the first one first
        first, last = first[order], last[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (first[1:] != first[:-1]) | (last[1:] != last[:-1])
        if self.runs:
            maybe = np.flatnonzero(new & self.marks.holds(first))
            candidates, held = (first[maybe], last[maybe]), np.zeros(len(maybe), dtype=bool)
            for run in self.runs:
                held |= _holds(run, *candidates)
            new[maybe[held]] = False
        if new.any():
            self.runs.append((first[new], last[new]))  # sorted by the first half, as a run is
            self.marks.add(self.runs)
            while len(self.runs) > 1 and 2 * len(self.runs[-1][0]) >= len(self.runs[-2][0]):
                newer, older = list(self.runs.pop()), list(self.runs.pop())  # the lists alone hold the arrays now
                self.runs.append(_merge(older, newer))
        answers = np.empty(len(order), dtype=bool)
        answers[order] = new
        return answers


class Marks:
    """One bit per value of the top ``k`` bits of a digest's first half, set when some run holds such a digest: a
    clear bit proves a digest new. It has 8-32 bits per digest held (``k`` grows with them), so at most one bit in
    8 is set and about 7 new digests in 8 need no binary search."""

    def __init__(self):
        self.bits = np.zeros(0, dtype=np.uint8)

    @property
    def k(self) -> int:
        return (8 * len(self.bits)).bit_length() - 1 if len(self.bits) else 0

    def add(self, runs: list[Run]) -> None:
        """Mark the newest run's digests; first make room (and mark every run again) when the count outgrew it."""
        held = sum(len(first) for first, _ in runs)
        if held > len(self.bits):  # fewer than 8 bits a digest: 16-32 of them from here on
            k = max(MARK_BITS, (16 * held - 1).bit_length())  # 2**k >= 16 * held
            self.bits = np.zeros(1 << (k - 3), dtype=np.uint8)
            for first, _ in runs[:-1]:
                self._mark(first)
        self._mark(runs[-1][0])

    def holds(self, first: np.ndarray) -> np.ndarray:
        if not self.k:
            return np.zeros(len(first), dtype=bool)
        top = first >> np.uint64(64 - self.k)
        return (self.bits[top >> np.uint64(3)] >> (top & np.uint64(7)).astype(np.uint8)) & 1 == 1

    def _mark(self, first: np.ndarray) -> None:
        for at in range(0, len(first), SLICE):  # a whole run at once would take 32 bytes a digest in temporaries
            top = first[at:at + SLICE] >> np.uint64(64 - self.k)
            np.bitwise_or.at(self.bits, top >> np.uint64(3), np.left_shift(1, top & np.uint64(7)).astype(np.uint8))


def _halves(batch: bytes) -> Run:
    """The first and last 8 bytes of each 16-byte digest of ``batch``, as big-endian unsigned integers (so that
    integer order is byte order), in native uint64 arrays."""
    if len(batch) % DIGEST:
        raise ValueError(f"a batch of digests is {len(batch)} bytes, not a multiple of {DIGEST}")
    pairs = np.frombuffer(batch, dtype=">u8").reshape(-1, 2)
    return pairs[:, 0].astype(np.uint64), pairs[:, 1].astype(np.uint64)


def _holds(run: Run, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Whether ``run`` holds each digest (``first``, ``last``): the first entry of equal first half decides, unless
    the run has several of that first half (then all of them are compared)."""
    run_first, run_last = run
    at = np.minimum(np.searchsorted(run_first, first), len(run_first) - 1)
    same_first = run_first[at] == first
    held = same_first & (run_last[at] == last)
    for i in np.flatnonzero(same_first & ~held):  # another digest of that first half may follow
        end = np.searchsorted(run_first, first[i], side="right")
        held[i] = bool((run_last[at[i]:end] == last[i]).any())
    return held


def _merge(a: list[np.ndarray], b: list[np.ndarray]) -> Run:
    """Two runs of distinct digests, none in both, as one run sorted by the first half: each of ``b``'s entries
    goes after the entries of ``a`` below it and the ones of ``b`` before it. ``a`` and ``b`` are emptied half by
    half, so that a half's inputs are freed once it is merged: the peak is 24 bytes a digest, not 32."""
    n = len(a[0]) + len(b[0])
    at_b = np.searchsorted(a[0], b[0])
    for at in range(0, len(at_b), SLICE):  # plus the entries of b before each, without a whole arange beside it
        at_b[at:at + SLICE] += np.arange(at, min(at + SLICE, len(at_b)))
    from_a = np.ones(n, dtype=bool)
    from_a[at_b] = False
    merged = []
    while a:
        out = np.empty(n, dtype=np.uint64)
        out[at_b] = b.pop(0)
        out[from_a] = a.pop(0)
        merged.append(out)
    return merged[0], merged[1]
