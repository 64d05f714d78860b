"""LoRA fine-tuning of a decoder (``--lora-rank``): the low-rank updates of ``xpt_ds.model.methods.lora`` on every
linear map of its layers, trained with the new task head while every weight the model's files hold stays frozen. It is
how a 1-8B decoder is fine-tuned on one GPU: AdamW's state and the gradients cover the trainable part only."""
from __future__ import annotations

import logging

from torch import nn

from xpt_ds.finetuning.data import FinetuneError
from xpt_ds.model.decoder import DECODER_FAMILIES
from xpt_ds.model.methods.lora import add_lora, is_lora, merged, targets_of

log = logging.getLogger("xpt_ds.cli.finetune")


def check_lora(model: str, config_dict: dict) -> None:
    """Before any weight is read: LoRA's targets are known for the decoder families built here."""
    model_type = config_dict.get("model_type", "?")
    if model_type not in DECODER_FAMILIES:
        raise FinetuneError(f"--lora-rank: --model {model} is a {model_type} model; LoRA fine-tuning targets the "
                            f"layers of a decoder family ({', '.join(DECODER_FAMILIES)})")


def with_lora(model: nn.Module, rank: int, alpha: float, model_type: str) -> nn.Module:
    """``model`` (a stock ``*For{Sequence,Token}Classification``) with LoRA on its layers, in place: only the LoRA
    updates and the task head (every parameter outside its ``base_model``, the stock backbone: Llama's ``score``,
    GPT-2's ``score`` or ``classifier``) keep ``requires_grad``. ``lora_A`` is drawn from torch's global
    generator, seeded by the caller; ``lora_B`` is zero, so the model starts as loaded."""
    targets = targets_of(model_type)
    add_lora(model, {"rank": rank, "alpha": alpha, "dropout": 0.0, "targets": list(targets),
                     "fan_in_fan_out": model_type == "gpt2"})
    backbone = model.base_model_prefix + "."
    new = {name for name, _ in model.named_parameters() if not name.startswith(backbone)}
    for name, p in model.named_parameters():
        p.requires_grad_(is_lora(name) or name in new)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    head = sum(p.numel() for n, p in model.named_parameters() if n in new)
    total = sum(p.numel() for n, p in model.named_parameters() if not is_lora(n))
    log.info("LoRA rank %d on %s: %s trainable parameters (%s of them the task head), %.2f%% of the model's %s",
             rank, ", ".join(targets), f"{trained:,}", f"{head:,}", 100 * trained / total, f"{total:,}")
    return model


def without_lora(model: nn.Module) -> nn.Module:
    """The same model with the updates merged into its weights (fp32 sums): a stock model to save."""
    return merged(model)
