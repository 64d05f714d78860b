"""A dataclass's fields as command-line flags: the one dataclass-to-argparse helper.

Every field made with ``config.doc`` carries its default and help; ``add_flags`` turns each into
``--field-name`` (a bool is a switch, a ``list[T]`` takes one or more values) whose help ends with the default.
Flags not given are absent from the parsed namespace (``argparse.SUPPRESS``), so the caller can layer
defaults < presets < flags.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing


def add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls, *, prefix: str = "",
              dest_prefix: str = "", skip: tuple[str, ...] = (), required: tuple[str, ...] = ()) -> None:
    """``--{prefix}{field-name}`` for every field of dataclass ``cls`` not in ``skip``, stored as
    ``{dest_prefix}{field_name}``; fields in ``required`` say so in their help (the caller checks them)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        note = "required" if f.name in required else f"default: {default!r}"
        parser.add_argument(f"--{prefix}{f.name.replace('_', '-')}", dest=dest_prefix + f.name,
                            default=argparse.SUPPRESS, help=f"{f.metadata['help']} ({note})",
                            **_kind(hints[f.name], f.name))


def _kind(typ, name: str) -> dict:
    if typ is bool:
        return {"action": "store_true"}
    metavar = name.split("_")[-1].upper()
    if typing.get_origin(typ) is list:
        return {"nargs": "+", "type": typing.get_args(typ)[0], "metavar": metavar}
    if typ in (int, float, str):
        return {"type": typ, "metavar": metavar}
    raise TypeError(f"field {name}: no flag for type {typ}")
