"""``activations.checkpoint_every``: activation checkpointing of the layer stack.

transformers' ``activation_checkpointing_enable`` (non-reentrant ``torch.utils.checkpoint``) on the HF model the
objective wraps: every Nth ``GradientCheckpointingLayer`` in module order (ITL_in, the reused layers, ITL_out, then
TreLM's TRILayer, whose class is the encoder's) keeps only its input in the forward and runs again in the backward.
The recomputation restores the forward's RNG state, so dropout draws the same masks and the gradients are the
same bits (``tests/training/test_activations.py``). It changes no parameter, name or ``state_dict``:
checkpoints, exports, phase patterns and resumes do not see it, and a run may resume with another setting.
Validation runs in eval mode, where nothing is recomputed. ZeRO-3's parameter hooks run again in the recomputation,
gathering the layer's weights a second time.
"""
from __future__ import annotations

from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer


def checkpoint_layers(hf: nn.Module, every: int) -> tuple[int, int]:
    """Checkpoint every ``every``-th layer of ``hf`` (a stock HF model, in place); (layers that recompute,
    layers)."""
    enable = getattr(hf, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=every)
    else:  # transformers 5.17 (the GPU machines' image) names it gradient_checkpointing_enable, same arguments
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=every)
    return recomputed_layers(hf)


def recomputed_layers(hf: nn.Module) -> tuple[int, int]:
    """(layers of ``hf`` that recompute in the backward, layers)."""
    layers = [m for m in hf.modules() if isinstance(m, GradientCheckpointingLayer)]
    return sum(bool(m.gradient_checkpointing) for m in layers), len(layers)
