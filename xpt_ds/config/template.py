"""``xpt-ds train --print-config`` without a runnable config: a config file to start from.

The keys a run cannot default (the source, the target tokenizer, the training shards, the shards the phases'
objectives read (TreLM's English and parallel shards), the phases' step counts) are filled with what to write there,
the method's phases are written out from its preset schedule, and every other key is checked as ``validate`` checks
it, so what remains to fill in is named and nothing else is wrong.
"""
from __future__ import annotations

import copy

from xpt_ds.config.job import OBJECTIVE_DATA, PhaseConfig, TrainConfig
from xpt_ds.config.manager import from_dict
from xpt_ds.config.methods import METHODS
from xpt_ds.config.validate import validate

SOURCE = "FILL IN: an English source model (hub id or local directory)"
TOKENIZER = "FILL IN: the target SentencePiece .model (xpt-data prepare writes it)"
SHARDS = "FILL IN: MANIFEST.json:train (xpt-data prepare) or shard paths"
OBJECTIVE_SHARDS = {  # the data keys TreLM's objectives read (config.OBJECTIVE_DATA)
    "source_shards": "FILL IN: English shards made with model.source's tokenizer (xpt-data prepare --hf-tokenizer)",
    "parallel_shards": "FILL IN: parallel shards made with both tokenizers (xpt-data parallel)",
}


def as_template(cfg: TrainConfig) -> tuple[TrainConfig, list[str]]:
    """``cfg`` checked, with its required keys that are empty filled; and the dotted keys filled, in order (none:
    ``cfg`` is a config to run). Raises the ConfigError of any other key, as a run would."""
    cfg, filled = copy.deepcopy(cfg), []
    method = METHODS.get(cfg.model.method)
    if not cfg.model.source:
        cfg.model.source = SOURCE
        filled.append("model.source")
    if not cfg.model.tokenizer and (method is None or method.vocab == "target"):
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

