"""MLM loss with the LM head computed only on masked positions (~15% of tokens); ``build_objective`` picks it, a
method extension's (TreLM's: ``xpt_ds.trelm.objective``) by the method that built the model, or the next-token loss
of a decoder (``xpt_ds.model.forward.causal_lm``)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from xpt_ds.config.methods import method_of
from xpt_ds.model.forward.causal_lm import CausalLMObjective
from xpt_ds.model.decoder import is_decoder
from xpt_ds.model.methods.extensions import extension_of


class MaskedLMObjective(nn.Module):
    """Wraps a stock *ForMaskedLM; parameter names are the HF names prefixed with ``hf.``."""

    def __init__(self, hf: nn.Module):
        super().__init__()
        self.hf = hf

    def forward(self, input_ids: torch.Tensor, mlm_positions: torch.Tensor, mlm_targets: torch.Tensor,
                attention_mask: torch.Tensor | None = None, return_logits: bool = False,
                score: Callable | None = None) -> torch.Tensor:
        """The mean loss over masked positions, or (``return_logits``) their [M, V] logits, or (``score``) 0 once
        ``score(logits, targets)`` has them (the decoder objective's validation call; M is some 15 % of the
        positions here, so in one part)."""
        # Packed training sequences have no padding: no attention mask, so SDPA takes its fastest kernel.
        # Only the last validation batch is padded and carries a mask.
        base = getattr(self.hf, self.hf.base_model_prefix)
        # use_cache=False: an encoder has no cache; said here, transformers does not warn under activation
        # checkpointing that it turned RoBERTa's config default (True) off.
        hidden = base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state  # [B,T,d]
        picked = hidden.flatten(0, 1).index_select(0, mlm_positions)  # [M, d]
        # BERT's cls / RoBERTa's lm_head: transform (dense, gelu, LayerNorm), then tied decoder + bias.
        head = self.hf.cls if hasattr(self.hf, "cls") else self.hf.lm_head
        logits = head(picked)  # [M, V]
        if return_logits:
            return logits
        if score is not None:
            score(logits, mlm_targets)
            return logits.new_zeros(())
        # Sum / max(M, 1): a batch with nothing masked (M = 0) still runs the head, as ZeRO-3 needs every rank
        # to take the same forward path, and gives 0 instead of NaN. M is a host-side shape: no sync.
        return F.cross_entropy(logits.float(), mlm_targets, reduction="sum") / max(mlm_targets.numel(), 1)


def build_objective(hf: nn.Module, attention: str = "sdpa") -> nn.Module:
    """The causal LM loss for a decoder (GPT-2, Llama families), with ``attention`` over its packed documents
    (``xpt_ds.model.forward.document_mask``); a method extension's objective
    (``xpt_ds.model.methods.extensions``: TreLM's, for a model that carries its training parts, a checkpoint's
    skeleton); else MLM: every other method, and a trelm export (``xpt_ds.trelm.hf``), whose base model runs the
    TRILayer itself."""
    if is_decoder(hf.config):  # next-token loss (xpt_ds.model.forward.causal_lm)
        return CausalLMObjective(hf, attention=attention)
    extension = extension_of(method_of(hf.config))
    own = extension.objective(hf) if extension is not None else None
    return own if own is not None else MaskedLMObjective(hf)


def strip_prefix(state: dict[str, torch.Tensor], prefix: str = "hf.") -> dict[str, torch.Tensor]:
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}
