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
from xpt_ds.errors import no_file
from xpt_ds.io.paths import write_text_atomic


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
            v = _yaml(v, key)  # a whole section or list given on the command line
        if dataclasses.is_dataclass(typ):
            kwargs[k] = from_dict(typ, v, key + ".")
        elif typ is dict:  # free-form options; whoever owns them checks keys and types (embedding_init_args)
            if not isinstance(v, dict) or not all(isinstance(x, str) for x in v):
                raise ConfigError(f"config key '{key}' must be a mapping of names to values, got {v!r}")
            kwargs[k] = _plain(v, key)
        elif typing.get_origin(typ) is list:
            if not isinstance(v, list):
                raise ConfigError(f"config key '{key}' must be a list, got {v!r}")
            elem = _element_type(typ)
            if dataclasses.is_dataclass(elem):  # an entry may be given whole on the command line: --phases.1={...}
                kwargs[k] = [from_dict(elem, _whole(x, f"{key}[{i}]"), f"{key}[{i}].") for i, x in enumerate(v)]
            else:
                kwargs[k] = [coerce(x, elem, f"{key}[{i}]") for i, x in enumerate(v)]
        else:
            kwargs[k] = coerce(v, typ, key)
    return cls(**kwargs)


def _yaml(text: Override, key: str):
    """A value given on the command line, read as YAML (a whole section or list, or a free-form option)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"config key '{key}': cannot read {str(text)!r} as YAML "
                          f"({str(e).splitlines()[0]}); quote items that start with @ or !, "
                          "e.g. '[\"@all\", \"!@lower\"]'") from None


def _whole(v, key: str):
    """A list's entry, read as YAML where the command line gave it whole (``--data.mix.0={name: en, ...}``)."""
    return _yaml(v, key) if isinstance(v, Override) else v


def _plain(v, key: str):
    """``v`` with every command-line value in it read as YAML (``--phases.1.mix.en=0.2`` is the weight 0.2): a
    free-form option has no type to convert it by, and an Override (a str subclass) cannot be saved as YAML."""
    if isinstance(v, Override):
        return _yaml(v, key)
    if isinstance(v, dict):
        return {k: _plain(x, f"{key}.{k}") for k, x in v.items()}
    return [_plain(x, f"{key}[{i}]") for i, x in enumerate(v)] if isinstance(v, list) else v


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def _parse_override(arg: str) -> tuple[list[str], Override]:
    if not arg.startswith("--") or "=" not in arg:
        raise ConfigError(f"override '{arg}' must look like --section.key=value")
    key, raw = arg[2:].split("=", 1)
    return key.split("."), Override(raw)


def _child(node, part: str, original: str):
    """The key of ``node[part]`` for a dict, or the index for a list (in range)."""
    if isinstance(node, list):
        if not part.isdigit() or int(part) >= len(node):
            raise ConfigError(f"override '{original}': '{part}' is not an index of a list of {len(node)}")
        return int(part)
    if not isinstance(node, dict):
        raise ConfigError(f"override '{original}': '{part}' is inside a value, not a section")
    return part


def _member(typ, part: str) -> tuple:
    """The type of ``part`` of a value of type ``typ`` (a section's key, a list's element; None: unknown), and
    what it starts as where the file leaves it out: a list key's default, else an empty section."""
    if dataclasses.is_dataclass(typ):
        f = {f.name: f for f in dataclasses.fields(typ)}.get(part)
        if f is not None:
            t = _field_type(f)
            return t, f.default_factory() if typing.get_origin(t) is list else {}
    elif typing.get_origin(typ) is list:
        return _element_type(typ), {}
    return None, {}


def _set_path(data: dict, path: list[str], value, original: str):
    """``data[path[0]][path[1]]... = value``. On the way, a section the file leaves out is created, a list it
    leaves out starts as the key's default (``--optim.betas.1=0.999``), and a value given whole by an earlier
    override is read as YAML (``--phases=[...] --phases.0.steps=5``)."""
    node, typ, key = data, TrainConfig, ""
    for part in path[:-1]:
        at = _child(node, part, original)
        key = f"{key}[{at}]" if isinstance(node, list) else f"{key}.{at}".lstrip(".")
        typ, start = _member(typ, part)
        if isinstance(node, dict) and at not in node:
            node[at] = start
        elif isinstance(node[at], Override):
            node[at] = _yaml(node[at], key)
        node = node[at]
    node[_child(node, path[-1], original)] = value


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load that refuses a key given twice in one mapping (PyYAML keeps the last one, silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                            f"found duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def parse_json(text: str, what: str):
    """``json.loads`` that refuses a key given twice in one object, as ``_UniqueKeyLoader`` does for YAML: the json
    module keeps the last one, silently dropping the other. ``what`` names the file in the error."""
    def unique(pairs: list) -> dict:
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise ConfigError(f"{what} does not parse: key {key!r} is given twice in one object")
            seen.add(key)
        return dict(pairs)

    return json.loads(text, object_pairs_hook=unique)


def read_config_file(path: str | Path) -> dict:
    """A YAML or JSON config file as a dict; a missing, unreadable or unparsable file is a ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(no_file(path, "config file"))
    try:
        text = p.read_text()
        if p.suffix == ".json":
            data = parse_json(text, f"config file {path}")
        else:
            data = yaml.load(text, _UniqueKeyLoader) or {}
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


def save_config(cfg: TrainConfig, path: Path, step: int | None = None) -> Path | None:
    """Whole or not at all: a full disk or a file-size limit left a cut or empty config.yaml in the run. With
    ``step`` (a start at that global step), an existing ``path`` whose text differs is kept first, as
    ``config_history/step_STEP.yaml`` beside it: what ran up to that start (returned; None when nothing moved)."""
    text, kept = config_yaml(cfg), None
    if step is not None:
        try:
            old = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            old = text
        if old != text:
            history = path.parent / "config_history"
            history.mkdir(exist_ok=True)
            kept = history / f"step_{step:08d}.yaml"
            n = 0
            while kept.exists():  # another start at the same step (one that failed before its next checkpoint)
                n += 1
                kept = history / f"step_{step:08d}.{n}.yaml"
            write_text_atomic(kept, old)
    write_text_atomic(path, text)
    return kept


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
