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


def _layers(base: nn.Module) -> nn.ModuleList:
    """The layer stack of a BERT/RoBERTa encoder (``encoder.layer``), a Llama-layout decoder (``layers``) or GPT-2
    (``h``)."""
    for path in ("encoder.layer", "layers", "h"):
        try:
            return base.get_submodule(path)
        except AttributeError:
            continue
    raise ConfigError(f"config key 'compile': no layer stack found in {type(base).__name__}")


def compile_blocks(objective: nn.Module, stage: int) -> int:
    """Compile ``objective``'s layers and LM head in place; returns how many modules were compiled."""
    if stage == 3:  # ZeRO-3 gathers parameters in module hooks, which the compiled graphs would bypass or break
        raise ConfigError("config key 'compile': torch.compile is supported with ZeRO stages 0-2, not 3")
    hf = objective.hf
    layers = list(_layers(getattr(hf, hf.base_model_prefix)))
    for layer in layers:
        layer.compile()
    head = hf.cls if hasattr(hf, "cls") else getattr(hf, "lm_head", None) or hf.get_output_embeddings()
    head.compile(dynamic=True)
    return len(layers) + 1
