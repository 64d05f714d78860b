"""Loading the config tree: defaults < YAML/JSON file < ``--section.key=value`` overrides, then
``validate``. Unknown keys and wrong types raise ``ConfigError`` naming the dotted key. Also the config a
checkpoint carries (keys renamed since are renamed), saving, and the ``--help`` listing of every key."""
from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import yaml

from xpt_ds.config.job import RENAMED_KEYS, ConfigError, TrainConfig, _element_type, _field_type
from xpt_ds.config.validate import validate
from xpt_ds.config.values import Override, coerce


def from_dict(cls, data, prefix: str = ""):
    """Build dataclass ``cls`` from a nested dict, rejecting unknown keys and wrong types."""
    if not isinstance(data, dict):
        raise ConfigError(f"config section '{prefix.rstrip('.') or '<root>'}' must be a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if k not in fields:
            raise ConfigError(f"unknown config key '{key}' (valid: {', '.join(fields)})")
        typ = _field_type(fields[k])
        if isinstance(v, Override) and typ is not str and typ not in (int, float, bool):
            try:
                v = yaml.safe_load(v)  # a whole section or list given on the command line
            except yaml.YAMLError as e:
                raise ConfigError(f"config key '{key}': cannot read {str(v)!r} as YAML "
                                  f"({str(e).splitlines()[0]}); quote items that start with @ or !, "
                                  "e.g. '[\"@all\", \"!@lower\"]'") from None
        if dataclasses.is_dataclass(typ):
            kwargs[k] = from_dict(typ, v, key + ".")
        elif typ is dict:  # free-form options; whoever owns them checks keys and types (embedding_init_args)
            if not isinstance(v, dict) or not all(isinstance(x, str) for x in v):
                raise ConfigError(f"config key '{key}' must be a mapping of names to values, got {v!r}")
            kwargs[k] = dict(v)
        elif typing.get_origin(typ) is list:
            if not isinstance(v, list):
                raise ConfigError(f"config key '{key}' must be a list, got {v!r}")
            elem = _element_type(typ)
            if dataclasses.is_dataclass(elem):
                kwargs[k] = [from_dict(elem, x, f"{key}[{i}].") for i, x in enumerate(v)]
            else:
                kwargs[k] = [coerce(x, elem, f"{key}[{i}]") for i, x in enumerate(v)]
        else:
            kwargs[k] = coerce(v, typ, key)
    return cls(**kwargs)


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def _parse_override(arg: str) -> tuple[list[str], Override]:
    if not arg.startswith("--") or "=" not in arg:
        raise ConfigError(f"override '{arg}' must look like --section.key=value")
    key, raw = arg[2:].split("=", 1)
    return key.split("."), Override(raw)


def _child(node, part: str, original: str, create: bool):
    """``node[part]`` for a dict (created when missing) or a list (by in-range index)."""
    if isinstance(node, list):
        if not part.isdigit() or int(part) >= len(node):
            raise ConfigError(f"override '{original}': '{part}' is not an index of a list of {len(node)}")
        return int(part)
    if not isinstance(node, dict):
        raise ConfigError(f"override '{original}': '{part}' is inside a value, not a section")
    if create:
        node.setdefault(part, {})
    return part


def _set_path(data: dict, path: list[str], value, original: str):
    node = data
    for part in path[:-1]:
        node = node[_child(node, part, original, create=True)]
    node[_child(node, path[-1], original, create=False)] = value


def read_config_file(path: str | Path) -> dict:
    """A YAML or JSON config file as a dict; a missing, unreadable or unparsable file is a ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        text = p.read_text()
        data = json.loads(text) if p.suffix == ".json" else (yaml.safe_load(text) or {})
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror or e}") from None
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} does not parse: {_parse_error(e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(data).__name__}")
    return data


def load_config(path: str | None, overrides: list[str] = ()) -> TrainConfig:
    """Defaults < file < overrides; then validate."""
    cfg = load_unchecked(path, overrides)
    validate(cfg)
    return cfg


def load_unchecked(path: str | None, overrides: list[str] = ()) -> TrainConfig:
    """Defaults < file < overrides, keys and types checked, values not (``validate``)."""
    data: dict = read_config_file(path) if path else {}
    for arg in overrides:
        keys, value = _parse_override(arg)
        _set_path(data, keys, value, arg)
    for (section, old), (new_section, new) in RENAMED_KEYS.items():
        if isinstance(data.get(section), dict) and old in data[section]:
            raise ConfigError(f"config key '{section}.{old}' was renamed '{new_section}.{new}'")
    return from_dict(TrainConfig, data)


def read_checkpoint_config(data: dict) -> TrainConfig:
    """The config a checkpoint carries, as a TrainConfig (keys renamed since it was written are renamed)."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for (section, old), (new_section, new) in RENAMED_KEYS.items():
        if old in data.get(section, {}):
            data.setdefault(new_section, {})[new] = data[section].pop(old)
    return from_dict(TrainConfig, data)


def config_yaml(cfg: TrainConfig) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def save_config(cfg: TrainConfig, path: Path) -> None:
    path.write_text(config_yaml(cfg))


def _parse_error(e: Exception) -> str:
    """One line, with the line and column for YAML (JSON's own message has them)."""
    if not isinstance(e, yaml.MarkedYAMLError):
        return str(e).splitlines()[0]
    parts = [f"{text} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else text
             for text, mark in ((e.context, e.context_mark), (e.problem, e.problem_mark)) if text]
    return ": ".join(parts) or str(e).splitlines()[0]


def help_text(cls=TrainConfig, prefix: str = "") -> str:
    lines = []
    for f in dataclasses.fields(cls):
        typ = _field_type(f)
        if dataclasses.is_dataclass(typ):
            lines.append(help_text(typ, f"{prefix}{f.name}."))
        else:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            lines.append(f"  --{prefix}{f.name}={default!r}\n      {f.metadata.get('help', '')}")
            if typing.get_origin(typ) is list and dataclasses.is_dataclass(_element_type(typ)):  # each phase's keys
                lines.append(help_text(_element_type(typ), f"{prefix}{f.name}.N."))
    return "\n".join(lines)
