"""TreLM's model parts as a method extension (``xpt_ds.model.methods.extensions``): the tags of its parameters, its
modules on a skeleton whose config asks for them (a trained model's checkpoint; an export has them folded), and
its objective for a model that carries them."""
from __future__ import annotations

from torch import nn

from xpt_ds.trelm.model import add_trelm, trelm_tags
from xpt_ds.trelm.objective import TreLMObjective


def tags(name: str) -> set[str]:
    return trelm_tags(name)


def add_modules(model: nn.Module, tcfg) -> None:
    if getattr(tcfg, "xpt_trelm_source_vocab_size", None):
        add_trelm(model)


def objective(hf: nn.Module) -> nn.Module | None:
    return TreLMObjective(hf) if hasattr(hf, "trelm") else None
