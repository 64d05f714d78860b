"""002 Table 2's intrinsic metrics on masked tokens: perplexity, Hits@1/3/5/10, MRR and MR.

The gold token's rank is 1 + the number of vocabulary entries scored strictly higher + half the number of
other entries scored the same: its expected rank when ties are broken at random, so a tie (common with bf16
logits) is neither a free hit nor a free miss. Hits@k counts rank <= k; MRR averages 1/rank; MR averages the
rank. Targets equal to ``IGNORE`` (unmasked or padding positions) do not count.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

IGNORE = -100
HITS_AT = (1, 3, 5, 10)
_FIELDS = ("nll", "tokens", "rr", "rank", *(f"hits@{k}" for k in HITS_AT))


def gold_ranks(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[N, V] scores and [N] gold ids -> [N] float64 ranks (1 = best)."""
    gold = logits.gather(1, targets[:, None])
    higher = (logits > gold).sum(1, dtype=torch.float64)
    ties = (logits == gold).sum(1, dtype=torch.float64) - 1
    return 1 + higher + ties / 2


class MLMStats:
    """Sums over batches (and ranks: ``all_reduce``) of everything the metrics need, on one device."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.sums = torch.zeros(len(_FIELDS), dtype=torch.float64, device=device)

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """logits [N, V] (or [B, T, V]) and targets [N] (or [B, T]); targets == IGNORE are skipped."""
        logits, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
        keep = targets != IGNORE
        logits, targets = logits[keep], targets[keep]
        ranks = gold_ranks(logits, targets)
        nll = F.cross_entropy(logits.float(), targets, reduction="sum").double()
        hits = [(ranks <= k).sum(dtype=torch.float64) for k in HITS_AT]
        self.sums += torch.stack([nll, torch.tensor(float(len(targets)), dtype=torch.float64, device=nll.device),
                                  ranks.reciprocal().sum(), ranks.sum(), *hits])

    def all_reduce(self) -> None:
        import deepspeed
        deepspeed.comm.all_reduce(self.sums)

    def result(self) -> dict[str, float]:
        s = dict(zip(_FIELDS, self.sums.tolist()))
        n = s["tokens"]
        if n == 0:
            return {"tokens": 0}
        loss = s["nll"] / n
        out = {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
        out.update({f"hits@{k}": s[f"hits@{k}"] / n for k in HITS_AT})
        out.update(mrr=s["rr"] / n, mr=s["rank"] / n, tokens=int(n))
        return out
