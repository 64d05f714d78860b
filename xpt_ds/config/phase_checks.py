"""The checks of ``config.validate`` that span phases: where each phase starts (``start_from``, ``merge``) and
what it trains on (``objectives``), and ``phase_objectives``, the list a phase trains on once defaults apply, and
``mix_weights``, the blend of its corpora (``data.mix``, ``phases[i].mix``)."""
from __future__ import annotations

import re

from xpt_ds.config.job import OBJECTIVE_DATA, OBJECTIVES, ConfigError, PhaseConfig, TrainConfig
from xpt_ds.config.methods import METHODS


def _earlier_phase(name, key: str, index: int, names: list[str]) -> None:
    """``name`` (at config key ``key`` of phases[index]) must be a phase that ends before phases[index] starts."""
    if not isinstance(name, str) or name not in names:
        raise ConfigError(f"config key '{key}' is {name!r}, which is no phase's name (phases: {', '.join(names)})")
    if names.index(name) >= index:
        raise ConfigError(f"config key '{key}' is '{name}', which is not an earlier phase (phases[{names.index(name)}]"
                          f"); a phase can start only from a phase that has ended")
    if not re.fullmatch(r"\w[\w.-]*", name):
        raise ConfigError(f"config key 'phases[{names.index(name)}].name' is {name!r}; a phase that another starts "
                          f"from names a file: use letters, digits, '_', '-' and '.'")


def check_phase_start(i: int, ph: PhaseConfig, names: list[str]) -> None:
    """start_from / merge name earlier phases; structural merge checks (patterns vs parameters) are in
    phases.build_phase_starts, which has the parameter groups."""
    key = f"phases[{i}]"
    if ph.start_from and ph.merges:
        raise ConfigError(f"config key '{key}' sets both start_from and merge; a phase starts from one place")
    if ph.start_from:
        _earlier_phase(ph.start_from, f"{key}.start_from", i, names)
    for pattern, name in ph.merge.take.items():
        _earlier_phase(name, f"{key}.merge.take.{pattern}", i, names)
    for k, name in enumerate(ph.merge.average):
        _earlier_phase(name, f"{key}.merge.average[{k}]", i, names)
    if len(set(ph.merge.average)) != len(ph.merge.average):
        raise ConfigError(f"config key '{key}.merge.average' names a phase twice: {ph.merge.average}")


def phase_objectives(cfg: TrainConfig, index: int) -> list[str]:
    """What phases[index] trains on: its objectives, or the default (today's single-phase TreLM: target MLM, plus
    CdLM English->target when there are parallel shards)."""
    listed = cfg.phases[index].objectives
    if listed:
        return list(listed)
    return ["mlm_target"] + (["cdlm_en_x"] if METHODS[cfg.model.method].trelm and cfg.data.parallel_shards else [])


def check_objectives(cfg: TrainConfig) -> None:
    """Known names, each once, mlm_target in every phase, a method that can train them and the data they read;
    data given for English text that no phase reads is an error too (a forgotten objectives list)."""
    method, used = cfg.model.method, set()
    for i, ph in enumerate(cfg.phases):
        key = f"phases[{i}].objectives"
        for name in ph.objectives:
            if name not in OBJECTIVES:
                raise ConfigError(f"config key '{key}' has '{name}'; valid: {', '.join(OBJECTIVES)}")
        if len(set(ph.objectives)) != len(ph.objectives):
            raise ConfigError(f"config key '{key}' names an objective twice: {ph.objectives}")
        objectives = phase_objectives(cfg, i)
        if "mlm_target" not in objectives:
            raise ConfigError(f"config key '{key}' lacks mlm_target: every phase trains target MLM (004 §3.2 uses "
                              f"it in all three phases), got {ph.objectives}")
        for name in objectives:
            if name != "mlm_target" and not METHODS[method].trelm:
                raise ConfigError(f"config key '{key}' has '{name}' but model.method '{method}' trains target MLM "
                                  "only (the other objectives need trelm)")
            if name.startswith("cdlm") and not METHODS[method].trilayer:
                raise ConfigError(f"config key '{key}' has '{name}' but model.method '{method}' has no TRILayer "
                                  "to reorder with (CdLM needs method trelm)")
            if not getattr(cfg.data, OBJECTIVE_DATA[name]):
                raise ConfigError(f"config key '{key}' has '{name}', which reads config key "
                                  f"'data.{OBJECTIVE_DATA[name]}', but that is empty")
        used.update(objectives)
    if cfg.data.source_shards and "mlm_source" not in used:
        raise ConfigError("config key 'data.source_shards' is set but no phase's objectives list mlm_source")
    for key in ("parallel_shards", "parallel_valid_shards"):
        if getattr(cfg.data, key) and not used & {"cdlm_en_x", "cdlm_x_en"}:
            raise ConfigError(f"config key 'data.{key}' is set but no phase's objectives list cdlm_en_x or "
                              "cdlm_x_en")


def mix_weights(cfg: TrainConfig, index: int) -> list[float]:
    """Phase ``index``'s share of the rows of data.train_shards, then of each data.mix corpus: its phases[i].mix
    weights where it names a corpus, else data.mix's; data.train_shards has the rest."""
    own = cfg.phases[index].mix if index < len(cfg.phases) else {}
    weights = [float(own.get(m.name, m.weight)) for m in cfg.data.mix]
    return [1 - sum(weights)] + weights
