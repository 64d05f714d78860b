"""Typed CLI options: a frozen dataclass whose fields carry their help text becomes an argparse group.

Field defaults live only in the dataclass; ``add_options`` derives each flag's type from its default (the
modules use ``from __future__ import annotations``, so ``field.type`` is a string) and ``options_from_args``
builds the dataclass back from the parsed namespace, so the CLI and the Python API cannot drift apart.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def option(default: Any, help: str, choices: tuple | None = None) -> Any:
    """A dataclass field with CLI help (and choices)."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


def add_options(parser: argparse.ArgumentParser, cls: type, title: str) -> None:
    group = parser.add_argument_group(title)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        help_ = f"{f.metadata.get('help', '')} (default: {f.default})"
        if isinstance(f.default, bool):
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default,
                               help=help_)
        else:
            group.add_argument(flag, dest=f.name, type=type(f.default), default=f.default,
                               choices=f.metadata.get("choices"), help=help_)


def options_from_args(cls: type[T], args: argparse.Namespace) -> T:
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})
