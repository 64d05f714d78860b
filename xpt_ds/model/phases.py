"""Which parameters train in each phase (regexes over HF parameter names, or @group tags from the builder), and
where each phase starts: where the previous phase ended, the end of an earlier phase (``start_from``, a branch),
or a merge of earlier phases' ends (``merge``, 004 Alg. 1 line 17)."""
from __future__ import annotations

import re
from collections.abc import Callable

import torch

from xpt_ds.config import ConfigError, MergeConfig, TrainConfig
from xpt_ds.config.methods import METHODS

XPT_PHASE1_EXTRA = ["@position", "@lm_head"]  # 000 §2: position embeddings and LM head may train in phase 1


def preset_patterns(cfg: TrainConfig, index: int) -> list[str]:
    presets = METHODS[cfg.model.method].presets
    if index >= len(presets):
        raise ConfigError(f"config key 'phases[{index}].trainable' is empty and method '{cfg.model.method}' has a "
                          f"preset for {len(presets)} phase(s) only; list the patterns")
    patterns = list(presets[index])
    if index == 0 and len(presets) > 1 and cfg.model.phase1_trains_position_and_head and \
            METHODS[cfg.model.method].phase1_extra:
        patterns += XPT_PHASE1_EXTRA
    return patterns


def _matches(pat: str, tags: dict[str, set[str]], key: str) -> set[str]:
    if pat.startswith("@"):
        hit = {n for n, t in tags.items() if pat in t}
    else:
        try:
            rx = re.compile(pat)
        except re.error as e:
            raise ConfigError(f"config key '{key}': bad regex '{pat}': {e}") from None
        hit = {n for n in tags if rx.fullmatch(n)}
    if not hit:
        valid = sorted({t for ts in tags.values() for t in ts})
        raise ConfigError(f"config key '{key}': pattern '{pat}' matches no parameter "
                          f"(groups: {', '.join(valid)}; or a regex over HF names)")
    return hit


def select(patterns: list[str], tags: dict[str, set[str]], key: str) -> set[str]:
    """Names matched by any pattern, less those matched by a '!pattern'; a pattern that matches nothing is an
    error naming it."""
    chosen, dropped = set(), set()
    for pat in patterns:
        if pat.startswith("!"):
            dropped |= _matches(pat[1:], tags, key)
        else:
            chosen |= _matches(pat, tags, key)
    return chosen - dropped


def build_phase_trainables(cfg: TrainConfig, tags: dict[str, set[str]]) -> list[set[str]]:
    """HF parameter names that train, per phase."""
    out = []
    for i, phase in enumerate(cfg.phases):
        patterns = phase.trainable or preset_patterns(cfg, i)
        chosen = select(patterns, tags, f"phases[{i}].trainable")
        if not chosen:
            raise ConfigError(f"config key 'phases[{i}].trainable' leaves no parameter to train: {patterns}")
        out.append(chosen)
    return out


def check_patterns(cfg: TrainConfig, tags: dict[str, set[str]]) -> None:
    """Every pattern of every phase (trainable or its preset, merge.take) matches some parameter of ``tags``; the
    same error ``select`` gives, before the source's weights are read (``build.planned_tags``). Whether a phase
    leaves anything to train is ``build_phase_trainables``' check, on the built model's tags."""
    for i, phase in enumerate(cfg.phases):
        for pat in phase.trainable or preset_patterns(cfg, i):
            _matches(pat.removeprefix("!"), tags, f"phases[{i}].trainable")
        for pat in phase.merge.take:
            _matches(pat.removeprefix("!"), tags, f"phases[{i}].merge.take")


Sources = dict[str, tuple[str, ...]]  # parameter name -> the phases whose end values it starts from (mean of >1)


def build_phase_starts(cfg: TrainConfig, tags: dict[str, set[str]]) -> list[Sources | None]:
    """Per phase, where every parameter starts, or None: where the previous phase ended."""
    out: list[Sources | None] = []
    for i, phase in enumerate(cfg.phases):
        if phase.start_from:
            out.append({n: (phase.start_from,) for n in tags})
        elif phase.merges:
            out.append(_merge_sources(phase.merge, tags, f"phases[{i}].merge"))
        else:
            out.append(None)
    return out


def _merge_sources(merge: MergeConfig, tags: dict[str, set[str]], key: str) -> Sources:
    """Every parameter from exactly one take pattern's phase, else averaged over merge.average."""
    sources: Sources = {}
    taken_by: dict[str, str] = {}
    for pattern, phase in merge.take.items():
        hit = select([pattern], tags, f"{key}.take")
        if not hit:
            raise ConfigError(f"config key '{key}.take': pattern '{pattern}' selects no parameter")
        for name in sorted(hit):
            if name in taken_by:
                raise ConfigError(f"config key '{key}.take': patterns '{taken_by[name]}' and '{pattern}' both take "
                                  f"{name}; each parameter comes from one phase")
            taken_by[name], sources[name] = pattern, (phase,)
    rest = sorted(set(tags) - set(sources))
    if rest and not merge.average:
        raise ConfigError(f"config key '{key}.average' is empty but {len(rest)} parameter(s) are in no take pattern "
                          f"(e.g. {rest[0]}); take them or name the phases to average them over")
    sources.update({name: tuple(merge.average) for name in rest})
    return sources


def phases_read_later(cfg: TrainConfig) -> set[str]:
    """Names of the phases whose end weights a later phase starts from: they are kept on disk when they end."""
    return {name for phase in cfg.phases for name in phase.reads()}


def value_from_ends(sources: Sources, ends: dict[str, Callable[[str], torch.Tensor]], name: str) -> torch.Tensor:
    """Parameter ``name``'s fp32 start value: a phase end's value (``ends[phase](name)``) as it is, or the mean of
    several, summed in the order merge.average lists them (the same bits on every rank and every rerun)."""
    values = [ends[p](name) for p in sources[name]]
    return values[0] if len(values) == 1 else sum(values[1:], values[0]) / len(values)
