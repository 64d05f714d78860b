"""One config value: a leaf checked against (or, from the command line, converted to) its field's type."""
from __future__ import annotations

import contextlib

from xpt_ds.config.job import ConfigError


class Override(str):
    """The raw text of a ``--key=value`` override: converted by the target field's type, not by YAML rules
    (YAML 1.1 reads ``5e-4`` as a string and ``no`` as False)."""


_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def _coerce_override(value: Override, typ, key: str):
    try:
        if typ is bool:
            return _BOOL_WORDS[value.lower()]
        if typ in (int, float):
            return typ(value)
    except (KeyError, ValueError):
        kind = {bool: "a bool", int: "an int", float: "a float"}[typ]
        raise ConfigError(f"config key '{key}' must be {kind}, got {str(value)!r}") from None
    return str(value)


def coerce(value, typ, key: str):
    """Check/convert one leaf value; ints are accepted where floats are expected."""
    if isinstance(value, Override):
        return _coerce_override(value, typ, key)
    if typ is float and isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
        with contextlib.suppress(ValueError):
            return float(value)
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config key '{key}' must be a bool, got {value!r}")
    if typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"config key '{key}' must be an int, got {value!r}")
    if typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"config key '{key}' must be a float, got {value!r}")
    if typ is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"config key '{key}' must be a string, got {value!r}")
    raise ConfigError(f"config key '{key}' has unsupported type {typ}")


def flatten(d, prefix: str = "") -> dict:
    """A nested config (dicts, and lists of dicts) as its leaves by dotted key: ``{"a": {"b": 1}}`` is
    ``{"a.b": 1}``, a list of sections is keyed by index (``phases.0.lr``); the resolved configs of two ranks
    (``xpt_ds.runtime.run_lock``) and two engine JSONs (``xpt_ds.config.engine_json``) are compared so."""
    if isinstance(d, dict):
        return {k: v for key, value in d.items() for k, v in flatten(value, f"{prefix}{key}.").items()}
    if isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        return {k: v for i, value in enumerate(d) for k, v in flatten(value, f"{prefix}{i}.").items()}
    return {prefix[:-1]: d}
