"""Model parts a method brings of its own (TreLM's TRILayer, English vocabulary, language embeddings and objective):
the method table names their module (``Method.extension``), and the generic model code reaches them only through
here, so it knows no method by name. Such a module defines

- ``tags(name) -> set[str]``: the @groups a parameter of its own carries (besides the generic ones);
- ``add_modules(model, tcfg)``: its modules, added to a skeleton whose HF config ``tcfg`` asks for them;
- ``objective(hf) -> nn.Module | None``: its training objective for ``hf``, or None for the plain one.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from xpt_ds.config.methods import Method


def extension_of(method: Method | None) -> ModuleType | None:
    if method is None or not method.extension:
        return None
    return importlib.import_module(method.extension)
