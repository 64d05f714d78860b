"""Typed CLI options: a frozen dataclass whose fields carry their help text becomes argparse flags.

Field defaults, help and choices live only in the dataclass; ``add_options`` derives each flag from its field
(``--field-name``, and the type from the default unless ``option`` names one: the modules use ``from __future__
import annotations``, so ``field.type`` is a string) and ``options_from_args`` builds the dataclass back from
the parsed namespace, so the CLI and the Python API cannot drift apart. ``positive_int`` and ``parse_size`` are
argparse types for such fields. ``as_invoked`` writes a command's help the way the user ran it.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Any, Callable, TypeVar

T = TypeVar("T")


# A command as the help texts spell it: ``xpt-data NAME`` or ``python -m data_tools.cli.MODULE``.
_COMMAND = re.compile(r"\bxpt-data (?P<name>[a-z][a-z-]*[a-z])\b|\bpython -m data_tools\.cli\.(?P<module>[a-z_]+)\b")


def as_invoked(text: str, prog: str) -> str:
    """``text`` (a command's help) with every data_tools command it names written the way ``prog`` was run:
    ``xpt-data NAME``, ``python -m data_tools NAME`` or ``python -m data_tools.cli.MODULE`` (dashes as underscores),
    so its usage line and the examples under it read as the user typed them."""
    module_form = prog.startswith("python -m data_tools.cli.")
    launcher = prog.rsplit(" ", 1)[0]  # "xpt-data", "python -m data_tools"

    def spell(m: re.Match) -> str:
        name = m["name"] or m["module"].replace("_", "-")
        return f"python -m data_tools.cli.{name.replace('-', '_')}" if module_form else f"{launcher} {name}"
    return _COMMAND.sub(spell, text)


def option(default: Any, help: str, choices: tuple | None = None, *, flag: str | None = None,
           type: Callable[[str], Any] | None = None, metavar: str | None = None,
           group: str | tuple[str, ...] | None = None, exclusive: str | None = None) -> Any:
    """A dataclass field with CLI help. ``flag`` replaces ``--field-name`` (a bool field defaulting to True
    whose flag is ``--no-...`` is that one flag, storing False, and its help states the default in words);
    ``type`` parses the flag's text when the default's type cannot (``None`` defaults, ``parse_size``);
    ``group`` names the help group(s) that take the flag (``add_options(group=)``); fields with the same
    ``exclusive`` tag are mutually exclusive flags."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices, "flag": flag, "type": type,
                                                        "metavar": metavar, "group": group, "exclusive": exclusive})


def _in_group(f: dataclasses.Field, group: str | None) -> bool:
    if group is None:
        return True
    tags = f.metadata.get("group")
    return group == tags or (isinstance(tags, tuple) and group in tags)


def add_options(container: argparse._ActionsContainer, cls: type, *, group: str | None = None,
                skip: tuple[str, ...] = ()) -> None:
    """A flag for every field of ``cls`` (or those of help group ``group``), less ``skip``, in field order, on
    ``container``: a parser or ``parser.add_argument_group(title)``."""
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for f in dataclasses.fields(cls):
        if not _in_group(f, group) or f.name in skip:
            continue
        meta = f.metadata
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        target = container
        if meta.get("exclusive"):
            if meta["exclusive"] not in exclusive:
                exclusive[meta["exclusive"]] = container.add_mutually_exclusive_group()
            target = exclusive[meta["exclusive"]]
        if isinstance(f.default, bool) and flag.startswith("--no-"):
            target.add_argument(flag, dest=f.name, action="store_false", default=f.default, help=meta["help"])
        elif isinstance(f.default, bool):
            target.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default,
                                help=f"{meta['help']} (default: {f.default})")
        else:
            kind = meta.get("type") or (None if f.default is None else type(f.default))
            target.add_argument(flag, dest=f.name, type=kind, default=f.default, choices=meta.get("choices"),
                                metavar=meta.get("metavar"), help=f"{meta['help']} (default: {f.default})")


def options_from_args(cls: type[T], args: argparse.Namespace) -> T:
    """``cls`` from the parsed flags; a field the parser has no flag for (another stage's) keeps its default."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return value


def parse_size(text: str) -> int | float:
    """argparse type of ``--valid``/``--test``: a whole number is a count of documents, a decimal in [0, 1) a
    fraction."""
    if re.fullmatch(r"\d+", text.strip()):
        return int(text)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is neither a document count nor a fraction") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"'{text}': a fraction must be in [0, 1) (or give a whole number of "
                                         "documents)")
    return value
