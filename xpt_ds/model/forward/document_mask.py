"""Attention over packed documents, for decoder sources: which kernel keeps the documents of a row apart.

A packed row holds several documents, and ``position_ids`` restart at 0 where each begins (``xpt_ds.data.causal``).
No token may attend to another document's.

- ``sdpa`` (the default): no mask is passed. transformers (5.x, ``masking_utils.find_packed_sequence_indices``)
  finds the restarts and builds a dense [B, 1, T, T] block-diagonal causal mask. SDPA is then given an explicit
  mask, which rules out its flash kernel: every score of every row is computed and then masked.
- ``flex``: FlexAttention with a ``BlockMask`` built here from the same restarts. The kernel skips every
  128 x 128 block that lies wholly across a document boundary or above the diagonal, and reads the mask function
  only in blocks that are partly masked. It is compiled on first use (Triton on CUDA). It has no attention
  dropout and, on the CPU, no backward (``xpt_ds.model.preflight.check_source`` and
  ``xpt_ds.training.engine.check_attention_device`` refuse those), and one mask serves every layer, so a model
  whose layers slide their attention over a window shorter than the rows is refused too (``check_window``).

Both give the same logits within rounding (``tests/model/test_document_mask.py``; on CUDA in bf16,
``tests/gpu/test_cuda_document_mask.py``).
"""
from __future__ import annotations

import torch

from xpt_ds.config import ConfigError

FLEX = "flex_attention"  # transformers' name for the FlexAttention implementation


def document_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """[B, T] -> [B, T]: which document of its row each token is in (1 for the first, counting restarts to 0)."""
    return (position_ids == 0).cumsum(dim=1)


def document_block_mask(position_ids: torch.Tensor):
    """The causal, document-separated ``BlockMask`` of packed rows ([B, T] ``position_ids`` restarting at 0 at each
    document): token q sees token k if k <= q and both are in the same document. One mask serves every layer."""
    from torch.nn.attention.flex_attention import create_block_mask

    docs = document_ids(position_ids)
    B, T = docs.shape

    def same_document_causal(b, h, q, k):
        return (k <= q) & (docs[b, q] == docs[b, k])

    return create_block_mask(same_document_causal, B, None, T, T, device=position_ids.device)


def check_window(tcfg, seq_len: int) -> None:
    """``flex`` passes one causal mask to every layer: refuse a target whose layers slide their attention over a
    window shorter than the rows (Mistral's ``sliding_window``, Gemma2/3's sliding ``layer_types``), where layers
    would see further back than the stock model does."""
    window = getattr(tcfg, "sliding_window", None)
    kinds = getattr(tcfg, "layer_types", None)
    slides = window and ("sliding_attention" in kinds if isinstance(kinds, list) else True)
    if slides and window < seq_len:
        raise ConfigError(f"config key 'model.attention' is 'flex', but {tcfg.model_type}'s layers attend within a "
                          f"sliding window of {window} tokens, shorter than data.seq_len {seq_len}; use 'sdpa'")
