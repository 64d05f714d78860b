"""``xpt-ds train --print-config`` without a runnable config: a config file to start from.

The keys a run cannot default (the source, the target tokenizer, the training shards, the shards the phases'
objectives read (TreLM's English and parallel shards), the phases' step counts) are filled with what to write there,
the method's phases are written out from its preset schedule, and every other key is checked as ``validate`` checks
it, so what remains to fill in is named and nothing else is wrong. On a machine without CUDA the template's engine is
the CPU one (``CPU_ENGINE``), unless the config or the command line named one: the default, bf16 with DeepSpeed's
FusedAdam, is several times slower a step on a CPU (docs/config.md, "On CPU").
"""
from __future__ import annotations

import copy

from xpt_ds.config.job import OBJECTIVE_DATA, OptimConfig, PhaseConfig, TrainConfig
from xpt_ds.config.manager import config_yaml, from_dict, read_config_file
from xpt_ds.config.methods import METHODS
from xpt_ds.config.validate import validate

SOURCE = "FILL IN: an English source model (hub id or local directory)"
TOKENIZER = "FILL IN: the target SentencePiece .model (xpt-data prepare writes it)"
SHARDS = "FILL IN: MANIFEST.json:train (xpt-data prepare) or shard paths"
OBJECTIVE_SHARDS = {  # the data keys TreLM's objectives read (config.OBJECTIVE_DATA)
    "source_shards": "FILL IN: English shards made with model.source's tokenizer (xpt-data prepare --hf-tokenizer)",
    "parallel_shards": "FILL IN: parallel shards made with both tokenizers (xpt-data parallel)",
}
# The engine for a CPU: ZeRO-1 fp32 with torch AdamW (optim.torch_adam: true, the demo's). The demo's setup on 2
# cores of an AMD EPYC without bf16 instructions steps about CPU_SPEEDUP times as fast with it as with the default,
# bf16 with FusedAdam; bf16 is the cost, the optimizer is not (docs/config.md, "On CPU").
CPU_ENGINE = "ds_configs/zero1_fp32.json"
CPU_SPEEDUP = 4
ENGINE_KEYS = ("--deepspeed=", "--optim=", "--optim.torch_adam=")  # the overrides that name the engine


def engine_named(path: str | None, overrides: list[str]) -> bool:
    """Whether the config file or the command line sets ``deepspeed`` or ``optim.torch_adam``."""
    data = read_config_file(path) if path else {}
    optim = data.get("optim")
    return ("deepspeed" in data or isinstance(optim, dict) and "torch_adam" in optim
            or any(arg.startswith(ENGINE_KEYS) for arg in overrides))


def cpu_engine_comment(text: str) -> str:
    """A template's YAML (``config_yaml``) with the lines that say why its engine is the CPU one above its
    ``deepspeed`` key; YAML reads them as comments, so the template still reads back as itself."""
    gpu = (f"{TrainConfig.deepspeed} with optim.torch_adam: "  # the defaults
           f"{str(OptimConfig.torch_adam).lower()}")
    note = [f"# No CUDA here: the CPU engine, {CPU_ENGINE} with optim.torch_adam: true (fp32, torch AdamW).",
            f"# The default, bf16 with DeepSpeed's FusedAdam, steps ~{CPU_SPEEDUP}x slower on a CPU without bf16",
            f"# instructions (docs/config.md, On CPU). A GPU run uses {gpu}."]
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("deepspeed:"))
    return "".join(lines[:at] + [line + "\n" for line in note] + lines[at:])


def template_yaml(cfg: TrainConfig, named: bool) -> str:
    """``as_template``'s config as YAML for this machine: without CUDA, with the CPU engine where the config and
    the command line name none (``named``: ``engine_named``), and the lines that say why. A config to run is
    printed as it is (``config_yaml``): what the run will use."""
    import torch  # only here: a config to run prints without it
    if torch.cuda.is_available():
        return config_yaml(cfg)
    if not named:
        cfg = copy.deepcopy(cfg)
        cfg.deepspeed, cfg.optim.torch_adam = CPU_ENGINE, True
    text = config_yaml(cfg)
    return cpu_engine_comment(text) if cfg.deepspeed == CPU_ENGINE and cfg.optim.torch_adam else text


def as_template(cfg: TrainConfig) -> tuple[TrainConfig, list[str]]:
    """``cfg`` checked, with its required keys that are empty filled; and the dotted keys filled, in order (none:
    ``cfg`` is a config to run). Raises the ConfigError of any other key, as a run would."""
    cfg, filled = copy.deepcopy(cfg), []
    method = METHODS.get(cfg.model.method)
    if not cfg.model.source:
        cfg.model.source = SOURCE
        filled.append("model.source")
    if not cfg.model.tokenizer and (method is None or method.vocab in ("target", "extend")):
        cfg.model.tokenizer = TOKENIZER
        filled.append("model.tokenizer")
    if not cfg.data.train_shards:
        cfg.data.train_shards = [SHARDS]
        filled.append("data.train_shards")
    if not cfg.phases and method is not None:
        cfg.phases = [from_dict(PhaseConfig, p.as_config(), "phases[].") for p in method.schedule]
    read = dict.fromkeys(OBJECTIVE_DATA[name] for ph in cfg.phases for name in ph.objectives)
    for key in [k for k in read if k in OBJECTIVE_SHARDS and not getattr(cfg.data, k)]:
        setattr(cfg.data, key, [OBJECTIVE_SHARDS[key]])
        filled.append(f"data.{key}")
    unset = [(i, ph.steps, ph.warmup_steps) for i, ph in enumerate(cfg.phases) if ph.steps <= 0]
    filled += [f"phases[{i}].steps" for i, _, _ in unset]
    for i, _, _ in unset:  # the step counts are the user's to choose: any positive count checks the rest
        cfg.phases[i].steps = max(1, cfg.phases[i].warmup_steps)
    validate(cfg)
    for i, steps, warmup in unset:
        cfg.phases[i].steps, cfg.phases[i].warmup_steps = steps, warmup
    return cfg, filled


def template_note(filled: list[str]) -> str:
    return (f"a config to start from, not yet one to run: fill in {', '.join(filled)} (every other key is checked; "
            "the source, tokenizer, shards and DeepSpeed JSON are read when a run starts)")

