"""docs/config.md, written from the typed config tree: every key with its default and help.
``python -m xpt_ds.config.reference > docs/config.md`` regenerates it; a test keeps the committed file equal to
this output."""
from __future__ import annotations

import dataclasses
import typing

from xpt_ds.config.job import TrainConfig, _element_type, _field_type

HEADER = """# Config reference

Every key of a training config (`python -m xpt_ds.train --config FILE [--section.key=value ...]`), with its
default. A config file is YAML or JSON with these sections; a key left out takes its default, an unknown key or a
wrong type is a one-line error naming the key. `python -m xpt_ds.train --help` prints the same list;
`--print-config` (with or without `--config` and overrides) prints the resolved config, every key, as YAML, and
exits: what `RUN_DIR/config.yaml` will hold. Every key is checked as far as a config alone can be (the source,
tokenizer, shards and DeepSpeed JSON are read when a run starts). Keys a run needs and the config leaves empty
(`model.source`, `model.tokenizer`, `data.train_shards`, the phases' `steps`) are filled with what to write there,
an empty `phases` with the method's preset phases, and a line on stderr names them: a config file to start from.
This file is written by `python -m xpt_ds.config.reference > docs/config.md` (`tests/test_config.py` checks that
it is current), so edit the help strings in `xpt_ds/config/job.py`, not this file. What each `model.method`
builds and trains is in [methods.md](methods.md), "The method table"; the engine JSONs are in `ds_configs/`.
"""


def _default(f: dataclasses.Field):
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(cls, prefix: str) -> list[str]:
    rows = ["| key | default | meaning |", "|---|---|---|"]
    nested = []
    for f in dataclasses.fields(cls):
        typ = _field_type(f)
        if dataclasses.is_dataclass(typ):
            nested.append((f"{prefix}{f.name}", typ, f.metadata.get("help", "")))
            continue
        rows.append(f"| `{prefix}{f.name}` | `{_default(f)!r}` | {_cell(f.metadata.get('help', ''))} |")
        if typing.get_origin(typ) is list and dataclasses.is_dataclass(_element_type(typ)):
            nested.append((f"{prefix}{f.name}.N", _element_type(typ), "Each entry's keys."))
    out = rows if len(rows) > 2 else []
    for name, sub, help_ in nested:
        out += ["", f"### `{name}`", "", help_, "", *_table(sub, f"{name}.")]
    return out


def markdown() -> str:
    lines = [HEADER, "Top-level keys:", "", *_table(TrainConfig, "")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
