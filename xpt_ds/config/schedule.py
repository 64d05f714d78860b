"""The learning rate a phase's schedule (phases[*].lr, warmup_steps, decay, min_lr_ratio, steps) gives at each of
its optimizer steps: what the trainer sets before every step, and what a resume with another schedule compares."""
from __future__ import annotations

import math

from xpt_ds.config.job import PhaseConfig


def lr_at(phase: PhaseConfig, step: int) -> float:
    """Learning rate for optimizer step ``step`` (0-based) of ``phase``: linear warmup, then decay."""
    if step < phase.warmup_steps:
        return phase.lr * (step + 1) / phase.warmup_steps
    if phase.decay == "constant":
        return phase.lr
    progress = (step - phase.warmup_steps) / max(1, phase.steps - phase.warmup_steps)
    frac = 1 - progress if phase.decay == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
    return phase.lr * (phase.min_lr_ratio + (1 - phase.min_lr_ratio) * frac)
