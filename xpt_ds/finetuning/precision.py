"""Fine-tuning's arithmetic (``--precision``): fp32 weights everywhere, with the forward and backward in fp32 or
under bf16 autocast; with LoRA under autocast, the frozen weights of the wrapped linear maps stored in bf16.

Autocast runs a linear map in bf16 whatever its weight is stored in: an fp32 weight is rounded to bf16 at every
call, and the rounded copy is what the backward keeps (a frozen weight's copy is never cached, so one copy per call
lives until the backward). A LoRA base layer never changes, so rounding it once when the model is built gives the
same bits in every matmul and keeps 2 bytes a weight instead of 4 + 2 (by arithmetic, Llama-3.1-8B's layer maps:
14 GB instead of 42 GB). Embeddings, norms, the LoRA updates and the task head stay fp32 (autocast does not round
them)."""
from __future__ import annotations

import logging

import torch
from torch import nn

log = logging.getLogger("xpt_ds.cli.finetune")


def uses_autocast(precision: str, device: torch.device) -> bool:
    """``auto``: bf16 autocast on a GPU, fp32 on the CPU."""
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")


def autocast(enabled: bool, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


@torch.no_grad()
def frozen_bases_in_bf16(model: nn.Module) -> int:
    """Store the frozen weights (and biases) of every LoRA layer's base ``Linear``/``Conv1D`` in bf16, in place;
    returns how many elements. Only a base whose parameters are all frozen and floating point is cast."""
    from peft.tuners.lora import LoraLayer

    cast = 0
    for module in model.modules():
        if not isinstance(module, LoraLayer):
            continue
        params = list(module.get_base_layer().parameters())
        if params and not any(p.requires_grad or not p.is_floating_point() for p in params):
            for p in params:
                p.data = p.data.to(torch.bfloat16)
                cast += p.numel()
    log.info("LoRA under bf16 autocast: the %s frozen weights of the adapted linear maps are stored in bf16 (the "
             "bits autocast computes with)", f"{cast:,}")
    return cast
