"""``guard.max_train_minutes``: a wall-clock budget for the training loop, shared out among the phases.

The loop's time (steps, validation passes, saves, phase hand-overs; not start-up, resume or export) adds up in the
trainer's state (``TrainerState.train_seconds``), over resumes. Each rank measures its own time per step and every
rank adds the slowest rank's (one column of the per-step host exchange), so the count, and every decision read from
it, is the same on every rank. A phase's share is fixed when it starts: what is left of the budget, in proportion
to its planned steps among those of the phases still to run, so that time a phase leaves unused (an early stop) goes
to the later ones. A phase that has used its share ends at the next step, as an early stop does (validation pass,
checkpoint), and its index joins ``TrainerState.time_stopped``: a resume never runs it again.
"""
from __future__ import annotations


def phase_share(budget_s: float, used_at_start: float, phase_steps: list[int], index: int) -> float:
    """Seconds phase ``index`` may train: the budget left when it started (``used_at_start`` spent by then) times
    its planned steps over those of phases ``index`` and later."""
    left = max(0.0, budget_s - used_at_start)
    rest = sum(phase_steps[index:])
    return left * phase_steps[index] / rest if rest > 0 else left


def share_used(budget_s: float, state, phase_steps: list[int]) -> bool:
    """Whether the current phase (``state``: the trainer's phase_index, train_seconds and phase_start_seconds)
    has used its share; never with the budget off (``budget_s`` 0)."""
    if budget_s <= 0:
        return False
    share = phase_share(budget_s, state.phase_start_seconds, phase_steps, state.phase_index)
    return state.train_seconds - state.phase_start_seconds >= share
