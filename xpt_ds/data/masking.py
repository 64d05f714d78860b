"""Which pieces an MLM batch masks (``data.masking``): single pieces, whole words, or spans of whole words.

- ``token``: each maskable piece independently with probability ``data.mask_prob`` (BERT, RoBERTa).
- ``whole_word``: whole words. A piece begins a word if its text says so (``metrics.mlm.starts_word`` with
  ``split_punctuation``: SentencePiece's ``▁``, byte-level BPE's ``Ġ``, any WordPiece piece that is not a ``##``
  continuation) or if it follows a special token (cls, sep, pad, unk, mask). Special tokens are never masked and
  are words of their own, so a word never spans one; a word the packing cuts at a sequence edge is a word in each
  sequence.
- ``span``: runs of whole words (SpanBERT, Joshi et al. 2020). Each sequence's words are cut into consecutive
  spans whose lengths in words are drawn from a geometric distribution (``data.span_p``) truncated to
  ``1..data.span_max`` and renormalised (SpanBERT's 0.2 and 10: mean 3.8 words); a span also ends at every special
  token, so one that would cross a document separator is cut there. Two neighbouring spans can both be chosen.

Budget (whole words and spans). A sequence with ``n`` maskable (non-special) pieces masks ``data.mask_prob * n``
pieces in expectation, exactly as ``token`` does: its units (words or spans) are taken in a random order while
they fit in that budget; the one unit that would overshoot it is taken with probability (budget left) / (its
pieces), so a sequence's count is within one unit of the budget and its expectation is the budget. The
80/10/10 rule then applies to each masked piece on its own (SpanBERT replaces whole spans instead).

Everything is batched [B, T] tensor work; the draws come from one generator per sequence (``MLMMasker``), so a
sequence's mask depends only on its seed.
"""
from __future__ import annotations

import numpy as np
import torch


def span_length_cdf(p: float, max_len: int) -> torch.Tensor:
    """[max_len] float64 cumulative probabilities of span lengths 1..max_len: geometric(p), truncated, renormalised."""
    weights = p * (1 - p) ** torch.arange(max_len, dtype=torch.float64)
    return weights.cumsum(0) / weights.sum()


def span_length_mean(p: float, max_len: int) -> float:
    """Mean span length in words (0.2 and 10: 3.797, SpanBERT's 3.8)."""
    probs = torch.diff(span_length_cdf(p, max_len), prepend=torch.zeros(1, dtype=torch.float64))
    return float((probs * torch.arange(1, max_len + 1)).sum())


def span_lengths(u: torch.Tensor, cdf: torch.Tensor) -> torch.Tensor:
    """Span lengths in words (1..len(cdf)) for uniforms ``u``, by inverting ``cdf`` (``span_length_cdf``)."""
    return torch.searchsorted(cdf, u.double(), right=True).clamp(max=len(cdf) - 1) + 1


def word_begins(ids: torch.Tensor, special: torch.Tensor, starts_word: torch.Tensor) -> torch.Tensor:
    """[B, T] True where a piece begins a word: ``starts_word`` ([V] bool) says so, it is special
    (``special``: [B, T]), it follows a special token, or it opens the row."""
    begins = starts_word[ids] | special
    begins[:, 1:] |= special[:, :-1]
    begins[:, 0] = True
    return begins


def span_begins(word_begin: torch.Tensor, special: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[B, T] True where a piece begins a span: the rows' words tiled by consecutive spans of ``lengths``
    ([B, T] words each, at least 1, so T of them cover any row), and a new span at every special token and after
    it."""
    B, T = word_begin.shape
    word = word_begin.cumsum(1) - 1  # [B, T] each piece's word index in its row
    first = torch.zeros(B, T + 1, dtype=torch.bool)  # [B, word]: word w opens a span; column T collects overflow
    first[:, 0] = True
    first.scatter_(1, lengths.cumsum(1).clamp(max=T), True)
    begins = word_begin & first.gather(1, word)
    begins |= special
    begins[:, 1:] |= special[:, :-1]
    return begins


def select_units(unit_begin: torch.Tensor, maskable: torch.Tensor, keys: torch.Tensor, last: torch.Tensor,
                 rate: float) -> torch.Tensor:
    """[B, T] pieces selected for MLM: whole units (words or spans; ``unit_begin`` marks their first pieces) in
    the order of ``keys`` ([B, T] uniforms, one per unit index) until ``rate`` x the row's maskable pieces; the unit
    that would overshoot is taken if ``last`` ([B] uniforms) < (budget left) / (its maskable pieces)."""
    T = unit_begin.shape[1]
    unit = unit_begin.cumsum(1) - 1  # [B, T] each piece's unit index; a row has at most T units
    size = torch.zeros(unit.shape, dtype=torch.int64).scatter_add_(1, unit, maskable.long())  # [B, unit]
    budget = rate * maskable.sum(1, keepdim=True, dtype=torch.float64)  # [B, 1]
    # Distinct int64 keys: torch.rand's floats are multiples of 2**-24, the unit index breaks ties, so every sort
    # algorithm gives the same order. Empty units (specials, past the row's last) go last. numpy's argsort is
    # about 5x torch's on [64, 512] (numpy 2, torch 2.13, one thread).
    ranks = torch.where(size > 0, (keys * 2 ** 24).long(), 2 ** 24) * T + torch.arange(T)
    order = torch.from_numpy(np.argsort(ranks.numpy(), axis=1))
    taken_size = size.gather(1, order)  # [B, rank]
    after = taken_size.cumsum(1)  # maskable pieces selected once the unit of this rank is in
    before = after - taken_size
    take = after <= budget
    take |= (before < budget) & (after > budget) & (last[:, None] * taken_size < budget - before)
    chosen = torch.zeros(unit.shape, dtype=torch.bool).scatter_(1, order, take)  # [B, unit]
    return chosen.gather(1, unit) & maskable
