"""Next-token loss of a stock *ForCausalLM on packed rows (``xpt_ds.data.causal``), computed in chunks.

The batch names the positions that predict (``mlm_positions``, flat indices into B*T) and what they predict
(``mlm_targets``), as an MLM batch does, so validation, ``MLMStats`` and ``xpt_ds.cli.evaluate`` work unchanged.
``position_ids`` restart at every document, and no token attends across a document boundary: with
``attention="sdpa"`` transformers turns the restarts into a dense block-diagonal causal mask; with ``"flex"`` the
objective passes a FlexAttention ``BlockMask`` built from them (``xpt_ds.model.forward.document_mask``).

The head and the cross-entropy run on chunks of at most ``CE_CHUNK_ELEMENTS // V`` predicted positions, each
under activation checkpointing: the forward keeps only the scalar loss per chunk, the backward recomputes one
chunk's logits at a time, so no [N, V] logits (fp32 or other) live for the whole micro-batch. Validation and
``evaluate`` take the same chunks (``score``): their metrics see one chunk's logits at a time too.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from xpt_ds.model.forward.document_mask import FLEX, document_block_mask

CE_CHUNK_ELEMENTS = 2 ** 24  # logits per chunk: 64 MiB in fp32 (V = 49,152: 341 positions per chunk)


def logits_of(head: nn.Module, hidden: torch.Tensor, softcap: float | None = None) -> torch.Tensor:
    """The model's own logits: ``head(hidden)``, softcapped as its ``*ForCausalLM`` does where the config sets
    ``final_logit_softcapping`` (Gemma2: ``cap * tanh(logits / cap)``)."""
    logits = head(hidden)
    return logits if not softcap else torch.tanh(logits / softcap) * softcap


def _chunk_loss(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, softcap: float | None) -> torch.Tensor:
    return F.cross_entropy(logits_of(head, hidden, softcap).float(), targets, reduction="sum")


def chunked_cross_entropy(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, chunks: int,
                          softcap: float | None = None) -> torch.Tensor:
    """Summed CE of ``logits_of(head, hidden, softcap)`` ([N, d] -> [N, V]) against ``targets`` [N], in ``chunks``
    checkpointed pieces. ``chunks`` must not depend on N: under ZeRO-3 every call of ``head`` gathers its weight, a
    collective, so every rank must make the same number of calls (a chunk may be empty)."""
    size = -(-hidden.shape[0] // chunks)
    total = None
    for c in range(chunks):
        h, y = hidden[c * size:(c + 1) * size], targets[c * size:(c + 1) * size]
        loss = checkpoint(_chunk_loss, head, h, y, softcap, use_reentrant=False) if torch.is_grad_enabled() else \
            _chunk_loss(head, h, y, softcap)
        total = loss if total is None else total + loss
    return total


class CausalLMObjective(nn.Module):
    """Wraps a stock *ForCausalLM; parameter names are the HF names prefixed with ``hf.``. ``attention``: how
    documents are kept apart (``xpt_ds.config.job.ATTENTIONS``, ``xpt_ds.model.forward.document_mask``); ``"flex"``
    switches ``hf`` to FlexAttention."""

    def __init__(self, hf: nn.Module, chunk_elements: int = CE_CHUNK_ELEMENTS, attention: str = "sdpa"):
        super().__init__()
        self.hf = hf
        self.flex = attention == "flex"
        if self.flex:
            hf.set_attn_implementation(FLEX)
        self.chunk_positions = max(1, chunk_elements // hf.config.vocab_size)
        self.softcap = getattr(hf.config, "final_logit_softcapping", None)  # Gemma2's 30.0; None elsewhere

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, mlm_positions: torch.Tensor,
                mlm_targets: torch.Tensor, attention_mask: torch.Tensor | None = None,
                return_logits: bool = False, score: Callable | None = None) -> torch.Tensor:
        """The mean next-token loss over the predicting positions, or (``return_logits``) their [M, V] logits, or
        (``score``, validation and evaluate) ``score(logits, targets)`` called on the loss's chunks of them in
        turn, returning 0: no [M, V] logits for the whole micro-batch (M x V x 2 bytes, 17 GB at 32 rows of 2,048
        and Llama 3's 128,256 pieces, more again for the metrics' float32 copies)."""
        base = getattr(self.hf, self.hf.base_model_prefix)
        if self.flex and attention_mask is None:
            attention_mask = document_block_mask(position_ids)
        hidden = base(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                      use_cache=False).last_hidden_state  # [B, T, d]
        picked = hidden.flatten(0, 1).index_select(0, mlm_positions)  # [M, d]
        head = self.hf.get_output_embeddings()
        if return_logits:
            return logits_of(head, picked, self.softcap)
        chunks = -(-input_ids.numel() // self.chunk_positions)  # from the batch's shape only (ZeRO-3)
        if score is not None:
            size = -(-picked.shape[0] // chunks)
            for c in range(chunks):  # as chunked_cross_entropy: the same number of head calls on every rank
                score(logits_of(head, picked[c * size:(c + 1) * size], self.softcap),
                      mlm_targets[c * size:(c + 1) * size])
            return picked.new_zeros(())
        # Sum / max(M, 1), as MaskedLMObjective: M = 0 gives 0, not NaN; M is a host-side shape, no sync.
        return chunked_cross_entropy(head, picked, mlm_targets, chunks, self.softcap) / max(mlm_targets.numel(), 1)
