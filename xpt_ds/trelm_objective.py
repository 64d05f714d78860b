"""TreLM's training objective (004 §3.1, the unified form): MLM and CdLM in one forward pass.

Every row of a batch is an (S, A, W) triple: input S, alignment A (``order``: which input position each output
position reads), output W. Target-language MLM rows are S = the masked sequence, A = identity, W = the sequence
at its masked positions (``mlm_positions``/``mlm_targets``). CdLM rows are S = an English sentence, unmasked,
A = its target-to-source alignment, W = the target sentence, every position of it predicted through the target LM
head (``cdlm_positions``/``cdlm_targets``; ``xpt_ds.parallel_data`` builds these rows). The loss is
L_MLM + L_CdLM, each the mean over its own predictions (004 Algorithm 1 updates with both losses): a CdLM row
predicts every target piece, an MLM row ~15% of its pieces, and a single mean over all predictions would let
the pair count decide their weight.

A batch without CdLM fields (validation, ``xpt_ds.evaluate``) is plain target MLM through the TRILayer with the
identity order, so ``return_logits`` gives the same [M, V] logits as ``MaskedLMObjective``'s.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xpt_ds.trelm import TARGET, encode, lm_logits


def _mean_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # Sum / max(n, 1): nothing to predict gives 0, not NaN; n is a host-side shape, so no sync.
    return F.cross_entropy(logits.float(), targets, reduction="sum") / max(targets.numel(), 1)


class TreLMObjective(nn.Module):
    """Wraps a stock *ForMaskedLM carrying ``trelm`` (``xpt_ds.trelm``); parameter names are ``hf.`` + HF names."""

    def __init__(self, hf: nn.Module):
        super().__init__()
        self.hf = hf

    def forward(self, input_ids: torch.Tensor, mlm_positions: torch.Tensor, mlm_targets: torch.Tensor,
                attention_mask: torch.Tensor | None = None, return_logits: bool = False,
                input_lang: torch.Tensor | None = None, order: torch.Tensor | None = None,
                output_mask: torch.Tensor | None = None, cdlm_positions: torch.Tensor | None = None,
                cdlm_targets: torch.Tensor | None = None) -> torch.Tensor:
        """L_MLM + L_CdLM, or (``return_logits``) the [M, V] logits of the MLM positions. Positions are flat
        indices into the [B, T'] output."""
        hidden = encode(self.hf, input_ids, attention_mask, input_lang, order, output_mask).flatten(0, 1)
        M = mlm_positions.numel()
        positions = mlm_positions if cdlm_positions is None else torch.cat([mlm_positions, cdlm_positions])
        logits = lm_logits(self.hf, hidden.index_select(0, positions), TARGET)  # one head call for both
        if return_logits:
            return logits[:M]
        loss = _mean_nll(logits[:M], mlm_targets)
        if cdlm_positions is not None:
            loss = loss + _mean_nll(logits[M:], cdlm_targets)
        return loss
