"""``compile: true``: torch.compile of the repeated blocks, in place.

Each layer of the stack (ITL_in and ITL_out included) and the LM head are compiled with ``nn.Module.compile``,
which swaps the module's call for the compiled one and leaves its parameters, names and ``state_dict`` as they
were: checkpoints, exports and phase patterns do not see it. Layers rather than the whole model: one graph per
layer class is reused by every layer, and DeepSpeed's engine and the objective's host-side shapes (the number of
masked or predicting positions) stay outside the graphs. The head sees a different number of positions every
step, so it is compiled with dynamic shapes.
"""
from __future__ import annotations

from torch import nn

from xpt_ds.config import ConfigError
from xpt_ds.model.decoder import DECODER_FAMILIES, is_decoder


def _layers(hf: nn.Module) -> nn.ModuleList:
    """The layer stack: a decoder's from its family (``xpt_ds.model.decoder``), else an encoder's
    ``encoder.layer``."""
    base = getattr(hf, hf.base_model_prefix)
    if is_decoder(hf.config):
        return getattr(base, DECODER_FAMILIES[hf.config.model_type].layers)
    return base.encoder.layer


def compile_blocks(objective: nn.Module, stage: int) -> int:
    """Compile ``objective``'s layers and LM head in place; returns how many modules were compiled."""
    if stage == 3:  # ZeRO-3 gathers parameters in module hooks, which the compiled graphs would bypass or break
        raise ConfigError("config key 'compile': torch.compile is supported with ZeRO stages 0-2, not 3")
    hf = objective.hf
    layers = list(_layers(hf))
    for layer in layers:
        layer.compile()
    head = hf.cls if hasattr(hf, "cls") else hf.lm_head  # BERT's head; RoBERTa's, GPT-2's and Llama's
    head.compile(dynamic=True)
    return len(layers) + 1
