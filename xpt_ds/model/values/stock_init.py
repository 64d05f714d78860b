"""The starting value of a new parameter: what the stock class's own init gives it, from a generator of its own.

Every new parameter (ITLs, target rows, an untied head, adapters, LoRA, TreLM's) is drawn when the builder fills
it, once, from ``torch``'s generator seeded with ``param_seed(model.init_seed, NAME)``: its value depends on
its name and the seed only, not on the order parameters are built in, the world size, the ZeRO stage or the
device (values are drawn on the CPU, in float32).

Which distribution: the one the stock class uses. ``StockInit`` keeps a skeleton of the model on the meta
device; to draw NAME it puts a real float32 tensor in that parameter's place and runs the initialisers that
touch it, bottom up as transformers' ``initialize_weights`` does: the owning module's, then each enclosing
module's (GPT-2's attention re-draws ``c_proj.weight`` with its depth-scaled std). For a transformers module
that is its ``PreTrainedModel._init_weights`` (``initializer_range``, zero biases, unit norms, Gemma's zero
norms, zero padding rows); for xpt-ds's own modules their own draws (the adapters' ``Adapter``, TreLM's
``TreLMParts.reset_xpt_parameters``) and for peft's LoRA layers ``reset_lora_parameters`` (kaiming-uniform A,
zero B). Every other parameter of the skeleton stays on the meta device, where an initialiser writes nothing.
"""
from __future__ import annotations

import hashlib
import sys

import torch
from torch import nn

from xpt_ds.model.methods.adapters import Adapter


def param_seed(init_seed: int, name: str) -> int:
    """The seed of parameter ``name``'s generator: blake2b of the two, 63 bits."""
    digest = hashlib.blake2b(f"{init_seed}/{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def _is_lora_layer(module: nn.Module) -> bool:
    """A peft LoRA layer exists only once peft is imported (method lora imports it): every other run asks without
    importing peft, about 0.2 CPU-s of each rank's start."""
    lora = sys.modules.get("peft.tuners.lora")
    return lora is not None and isinstance(module, lora.LoraLayer)


def _init_adapter(adapter: Adapter) -> None:
    """``Adapter.__init__``'s own draws (adapters.py ships inside exports as it is, so its init is repeated here):
    the down projection N(0, 1e-3), everything else zero, so a new adapter is the identity."""
    nn.init.normal_(adapter.down.weight, std=1e-3)
    for p in (adapter.down.bias, adapter.up.weight, adapter.up.bias):
        nn.init.zeros_(p)


def _pretrained_of(module: nn.Module, parents: dict[int, nn.Module]):
    """The nearest ``PreTrainedModel`` at or above ``module``: whose ``_init_weights`` initialises it."""
    from transformers import PreTrainedModel
    m = module
    while m is not None and not isinstance(m, PreTrainedModel):
        m = parents.get(id(m))
    return m


class StockInit:
    """Draws new parameters of ``meta_model`` (a skeleton whose parameters are on the meta device)."""

    def __init__(self, meta_model: nn.Module, init_seed: int):
        self.model, self.init_seed = meta_model, init_seed
        self.parents: dict[int, nn.Module] = {}
        for module in meta_model.modules():
            for child in module.children():
                self.parents.setdefault(id(child), module)

    def _initialise(self, module: nn.Module) -> None:
        if _is_lora_layer(module):
            for adapter in module.lora_A:
                module.reset_lora_parameters(adapter, True)
            return
        if isinstance(module, Adapter):
            _init_adapter(module)
            return
        own = getattr(module, "reset_xpt_parameters", None)  # xpt-ds's own modules (TreLMParts)
        if own is not None:
            own()
            return
        pretrained = _pretrained_of(module, self.parents)
        if pretrained is not None:
            pretrained._init_weights(module)

    @torch.no_grad()
    def value(self, name: str) -> torch.Tensor:
        """Parameter ``name``'s starting value, float32 on the CPU."""
        owner_name, _, attr = name.rpartition(".")
        owner = self.model.get_submodule(owner_name)
        placeholder = owner._parameters[attr]
        real = nn.Parameter(torch.full(placeholder.shape, float("nan"), dtype=torch.float32), requires_grad=False)
        owner._parameters[attr] = real
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(param_seed(self.init_seed, name))
                module = owner
                while module is not None:
                    self._initialise(module)
                    module = self.parents.get(id(module))
        finally:
            owner._parameters[attr] = placeholder
        if torch.isnan(real).any():
            raise RuntimeError(f"no initialiser of the model sets parameter {name} ({type(owner).__name__}.{attr})")
        return real.data
