"""Model parts a method brings of its own (TreLM's TRILayer, English vocabulary, language embeddings and objective):
the method table names their module (``Method.extension``), and the generic model code reaches them only through
here, so it knows no method by name. Such a module defines

- ``tags(name) -> set[str]``: the @groups a parameter of its own carries (besides the generic ones);
- ``add_modules(model, tcfg)``: its modules, added to a skeleton whose HF config ``tcfg`` asks for them (every
  extension is asked, and each reads ``tcfg`` itself: a config records its parts, not always the method);
- ``objective(hf) -> nn.Module | None``: its training objective for ``hf``, or None for the plain one.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from xpt_ds.config.methods import METHODS, Method


def extension_of(method: Method | None) -> ModuleType | None:
    if method is None or not method.extension:
        return None
    return importlib.import_module(method.extension)


def all_extensions() -> list[ModuleType]:
    """Every extension the method table names, in a fixed order."""
    return [importlib.import_module(name) for name in sorted({m.extension for m in METHODS.values() if m.extension})]
