"""LoRA on a decoder source's reused layers (Hu et al. 2021), through ``peft``: the parameter-efficient baseline
people adapting a decoder to a new language reach for (``method: lora``, docs/decoders.md).

The new vocabulary's input rows (and an untied head) train with the low-rank updates; every source weight stays
frozen, bit for bit. LoRA goes into the model in place (``peft.inject_adapter_in_model``), not through a
``PeftModel`` wrapper, so the model is still the stock *ForCausalLM the trainer, ZeRO, the checkpoints and
``compile`` know: a targeted ``Linear``/``Conv1D`` becomes a ``peft`` LoRA layer whose ``base_layer`` holds the
source weight and whose ``lora_A``/``lora_B`` are new. The export merges the updates into the base weights
(``merge``), so the exported directory is a plain model that stock ``transformers`` loads without ``peft``.
"""
from __future__ import annotations

import torch
from torch import nn

from xpt_ds.config import ConfigError
from xpt_ds.model import finite

# Every linear map of a decoder layer's attention and MLP (peft's names match by the last path component).
GPT2_TARGETS = ("c_attn", "c_proj", "c_fc")
LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # every other family
# of Llama's layout (xpt_ds.model.decoder.LLAMA_LAYOUT)
FUSED_TARGETS = {"phi3": ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")}  # one map for q, k, v; one for gate, up
CONFIG_KEY = "xpt_lora"  # the HF config's record of the adapters: the skeleton of a resume or export has them


def targets_of(model_type: str) -> tuple[str, ...]:
    """The linear maps of one decoder layer of ``model_type`` (a DECODER_FAMILIES key)."""
    return GPT2_TARGETS if model_type == "gpt2" else FUSED_TARGETS.get(model_type, LLAMA_TARGETS)


def lora_settings(lora_cfg, model_type: str) -> dict:
    """The run's ``model.lora`` section as the plain dict the HF config records, the targets resolved."""
    valid = targets_of(model_type)
    targets = list(lora_cfg.targets) or list(valid)
    unknown = sorted(set(targets) - set(valid))
    if unknown:
        raise ConfigError(f"config key 'model.lora.targets': {', '.join(unknown)} is not a linear map of a "
                          f"{model_type} layer; valid: {', '.join(valid)}")
    return {"rank": lora_cfg.rank, "alpha": lora_cfg.alpha, "dropout": lora_cfg.dropout, "targets": targets,
            "fan_in_fan_out": model_type == "gpt2"}  # GPT-2's Conv1D stores its weight transposed


def add_lora(model: nn.Module, settings: dict) -> nn.Module:
    """LoRA layers on ``settings['targets']`` in every decoder layer, in place. ``lora_A`` is drawn from torch's
    global generator (kaiming-uniform, peft's default) and ``lora_B`` is zero, so the model computes what it did
    before; the caller seeds the generator."""
    try:  # peft: the lora method's own dependency (setup.cfg's lora extra)
        from peft import LoraConfig as PeftLoraConfig
        from peft import inject_adapter_in_model
    except ImportError as e:
        raise ConfigError(f"config key 'model.method': lora needs the peft package (pip install 'xpt-ds[lora]' or "
                          f"pip install peft): {e}") from None

    config = PeftLoraConfig(r=settings["rank"], lora_alpha=settings["alpha"], lora_dropout=settings["dropout"],
                        target_modules=list(settings["targets"]), fan_in_fan_out=settings["fan_in_fan_out"],
                        bias="none")
    inject_adapter_in_model(config, model)
    return model


def base_name(name: str) -> str:
    """The parameter's name in the model without LoRA: ``...q_proj.base_layer.weight`` -> ``...q_proj.weight``."""
    return name.replace(".base_layer.", ".")


def is_lora(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def _lora_layer(model: nn.Module, path: str):
    """The peft LoRA layer at module path ``path`` of ``model``, or None."""
    from peft.tuners.lora import LoraLayer
    try:
        module = model.get_submodule(path)
    except AttributeError:
        return None
    return module if isinstance(module, LoraLayer) else None


def is_lora_base(model: nn.Module, name: str) -> bool:
    """Whether ``name`` (a stock model's parameter name) is a weight or bias of a layer ``model`` wraps in LoRA."""
    return getattr(model.config, CONFIG_KEY, None) is not None and _lora_layer(model, name.rpartition(".")[0]) \
        is not None


@torch.no_grad()
def merged_value(model: nn.Module, name: str, values) -> torch.Tensor:
    """The stock parameter ``name`` of the merged model, from the trained model's ``values`` (by name, fp32):
    a LoRA layer's weight plus its low-rank update, computed by peft's own ``get_delta_weight`` and added as its
    ``merge(safe_merge=True)`` adds it (one layer's tensors in memory; ``model`` is a skeleton on the meta
    device, whose LoRA layer holds the values only while the update is computed). A non-finite result is an
    error naming the layer."""
    path, _, attr = name.rpartition(".")
    layer = _lora_layer(model, path)
    base = values(f"{path}.base_layer.{attr}")
    if attr != "weight":
        return base
    merged = base
    for adapter in layer.lora_A:
        swapped = []
        for part in (layer.lora_A[adapter], layer.lora_B[adapter]):
            key = f"{path}.{'lora_A' if part is layer.lora_A[adapter] else 'lora_B'}.{adapter}.weight"
            swapped.append((part, part._parameters["weight"]))
            part._parameters["weight"] = nn.Parameter(values(key), requires_grad=False)
        try:  # a new tensor, not an update of ``base`` in place (it may be the caller's)
            merged = merged + layer.get_delta_weight(adapter).to(merged.dtype)
        finally:
            for part, meta in swapped:
                part._parameters["weight"] = meta
    if not finite.all_finite(merged):
        raise ValueError(f"the LoRA update of {path} is not finite: its merged weight would be broken")
    return merged


def merged(model: nn.Module) -> nn.Module:
    """The same model with every LoRA update added into its base weight and the LoRA layers replaced by their
    base layers (in place; fp32 sums, a base stored in bf16 made fp32 first, one layer at a time): a stock model
    again, its config without the LoRA record."""
    from peft.tuners.lora import LoraLayer

    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLayer):
            module.get_base_layer().float()  # peft merges in the base's dtype: a bf16 base would round the update
            module.merge(safe_merge=True)  # safe_merge: a non-finite update is an error, not a broken export
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, module.get_base_layer())
    if hasattr(model.config, CONFIG_KEY):
        delattr(model.config, CONFIG_KEY)
    return model
