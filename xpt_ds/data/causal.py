"""Next-token targets for decoder sources: the MLM stream's packed rows with masking switched off.

``xpt_ds.data.mlm`` packs rows ``cls + stream[i*(L-2):(i+1)*(L-2)] + sep`` with ``sep`` after every document;
``NextTokenTargets`` takes the masker's place, so the stream, its exact resumable state (one integer) and its
sharding over ranks and workers are the MLM stream's own. For a row ``x`` ([T]):

- position t predicts ``x[t+1]``, for t + 1 < the index of the row's appended ``sep`` (that one marks the row's
  end, not a document's, so it is never a target; nor is padding after it, in the last validation row);
- a document boundary is a ``sep`` inside the row: it is predicted (the document ends, like GPT-2's
  ``<|endoftext|>``), then fed in as ``cls`` (``<s>``) at position 0 of the next document, so every document the
  model reads starts as an exported model's input does (``<s>`` at position 0);
- ``position_ids`` restart at 0 at the row start and at every boundary; ``xpt_ds.model.forward.causal_lm`` relies on
  them for the block-diagonal causal mask (no attention across documents).

No attention mask: trailing padding (validation only) comes after every position that predicts, and causal
attention never looks ahead.
"""
from __future__ import annotations

import torch

from xpt_ds.data.tokenizer import TargetTokenizer


class NextTokenTargets:
    """Callable like ``MLMMasker`` (ids [B, T], per-sequence seeds, unused) -> the causal LM batch."""

    pads_need_attention_mask = False

    def __init__(self, tok: TargetTokenizer):
        self.tok = tok

    def __call__(self, ids: torch.Tensor, seeds: list[int]) -> dict[str, torch.Tensor]:
        B, T = ids.shape
        col = torch.arange(T).expand(B, T)
        # [B, 1] the appended sep: the row's last sep (padding follows it), wherever else the pad id occurs (a
        # tokenizer's pad may be its bos or unk)
        end = torch.where(ids == self.tok.sep_id, col, 0).amax(1, keepdim=True)
        starts = ids == self.tok.sep_id  # a document (or the row's end marker) begins after each
        starts[:, 0] = True
        position_ids = col - torch.cummax(torch.where(starts, col, 0), dim=1).values
        inputs = torch.where(starts, self.tok.cls_id, ids)
        predicts = col < end - 1  # [B, T]: x[t+1] exists and is not the appended sep
        positions = predicts.flatten().nonzero().squeeze(1)  # [M] flat indices into B*T
        return {"input_ids": inputs, "position_ids": position_ids, "mlm_positions": positions,
                "mlm_targets": ids.flatten()[positions + 1]}
