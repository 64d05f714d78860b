"""TreLM's training objective (004 §3.1, the unified form): MLM and CdLM, in both languages, in one forward pass.

Every row of a batch is an (S, A, W) triple: input S, alignment A (``order``: which input position each output
position reads), output W, with the input's and the output's language (``input_lang``/``output_lang``). MLM rows
are S = the masked sequence, A = identity, W = the sequence at its masked positions: target MLM
(``mlm_positions``/``mlm_targets``) and English MLM (``mlm_source_*``, English in and out). CdLM rows are S = a
sentence, unmasked, A = the alignment of the other side to it, W = the other side, every position predicted:
English -> target (``cdlm_positions``/``cdlm_targets``) and target -> English (``cdlm_x_en_*``).
``xpt_ds.trelm.data`` builds these batches. Target predictions go through the stock LM head, English ones through
the English head (``trelm.lm_logits``). The loss is the sum of one mean per objective present (004 Algorithm 1
updates with both losses): a CdLM row predicts every piece, an MLM row ~15% of its pieces, and a single mean
over all predictions would let the row counts decide their weight.

A batch without CdLM or English fields (validation, ``xpt_ds.cli.evaluate``, a phase of target MLM only) is plain
target MLM through the TRILayer with the identity order, so ``return_logits`` gives the same [M, V] logits as
``MaskedLMObjective``'s.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from xpt_ds.trelm.model import ENGLISH, TARGET, encode, lm_logits

# objective (config.OBJECTIVES) -> the batch keys of its prediction positions (flat in [B*T']) and target ids
BATCH_KEYS = {"mlm_target": ("mlm_positions", "mlm_targets"), "cdlm_en_x": ("cdlm_positions", "cdlm_targets"),
              "mlm_source": ("mlm_source_positions", "mlm_source_targets"),
              "cdlm_x_en": ("cdlm_x_en_positions", "cdlm_x_en_targets")}


def _mean_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # Sum / max(n, 1): nothing to predict gives 0, not NaN; n is a host-side shape, so no sync.
    return F.cross_entropy(logits.float(), targets, reduction="sum") / max(targets.numel(), 1)


def _head_losses(hf: nn.Module, hidden: torch.Tensor, lang: int,
                 parts: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    """One mean NLL per (positions, targets) in ``parts``, all through ``lang``'s head in one call."""
    logits = lm_logits(hf, hidden.index_select(0, torch.cat([p for p, _ in parts])), lang)
    losses, start = [], 0
    for positions, targets in parts:
        losses.append(_mean_nll(logits[start:start + positions.numel()], targets))
        start += positions.numel()
    return losses


class TreLMObjective(nn.Module):
    """Wraps a stock *ForMaskedLM carrying ``trelm`` (``xpt_ds.trelm.model``); parameter names are ``hf.`` + HF
    names."""

    def __init__(self, hf: nn.Module):
        super().__init__()
        self.hf = hf

    def forward(self, input_ids: torch.Tensor, mlm_positions: torch.Tensor, mlm_targets: torch.Tensor,
                attention_mask: torch.Tensor | None = None, return_logits: bool = False,
                input_lang: torch.Tensor | None = None, order: torch.Tensor | None = None,
                output_mask: torch.Tensor | None = None, cdlm_positions: torch.Tensor | None = None,
                cdlm_targets: torch.Tensor | None = None, output_lang: torch.Tensor | None = None,
                mlm_source_positions: torch.Tensor | None = None, mlm_source_targets: torch.Tensor | None = None,
                cdlm_x_en_positions: torch.Tensor | None = None,
                cdlm_x_en_targets: torch.Tensor | None = None, logits_for: str = "mlm_target",
                score: Callable | None = None) -> torch.Tensor:
        """The sum of the objectives' mean losses, or (``return_logits``) the [M, V] logits of the positions of
        objective ``logits_for`` (the target MLM's by default; validation scores CdLM this way) through its
        output language's head, or (``score``) 0 once ``score(logits, targets)`` has the target MLM's.
        Positions are flat indices into the [B, T'] output."""
        hidden = encode(self.hf, input_ids, attention_mask, input_lang, order, output_mask,
                        output_lang).flatten(0, 1)
        if score is not None:
            logits = lm_logits(self.hf, hidden.index_select(0, mlm_positions), TARGET)
            score(logits, mlm_targets)
            return logits.new_zeros(())
        if return_logits:
            positions = {"mlm_target": mlm_positions, "cdlm_en_x": cdlm_positions,
                         "mlm_source": mlm_source_positions, "cdlm_x_en": cdlm_x_en_positions}[logits_for]
            lang = ENGLISH if logits_for in ("mlm_source", "cdlm_x_en") else TARGET
            return lm_logits(self.hf, hidden.index_select(0, positions), lang)
        target = [(mlm_positions, mlm_targets)] + ([] if cdlm_positions is None else [(cdlm_positions, cdlm_targets)])
        english = [(p, t) for p, t in ((mlm_source_positions, mlm_source_targets),
                                       (cdlm_x_en_positions, cdlm_x_en_targets)) if p is not None]
        losses = _head_losses(self.hf, hidden, TARGET, target)
        if english:
            losses += _head_losses(self.hf, hidden, ENGLISH, english)
        return sum(losses[1:], losses[0])
