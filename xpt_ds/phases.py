"""Which parameters train in each phase: regexes over HF parameter names, or @group tags from the builder."""
from __future__ import annotations

import re

from xpt_ds.config import ConfigError, TrainConfig
from xpt_ds.methods import METHODS

XPT_PHASE1_EXTRA = ["@position", "@lm_head"]  # 000 §2: position embeddings and LM head may train in phase 1


def preset_patterns(cfg: TrainConfig, index: int) -> list[str]:
    presets = METHODS[cfg.model.method].presets
    if index >= len(presets):
        raise ConfigError(f"config key 'phases[{index}].trainable' is empty and method '{cfg.model.method}' has a "
                          f"preset for {len(presets)} phase(s) only; list the patterns")
    patterns = list(presets[index])
    if index == 0 and len(presets) > 1 and cfg.model.phase1_trains_position_and_head:
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
