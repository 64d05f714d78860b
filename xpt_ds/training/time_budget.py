"""``guard.max_train_minutes``: a wall-clock budget for the training loop, shared out among the phases.

The loop's time (steps, validation passes, saves, phase hand-overs; not start-up, resume or export) adds up in the
trainer's state (``TrainerState.train_seconds``), over resumes. Each rank measures its own time per step and every
rank adds the slowest rank's (one column of the per-step host exchange), so the count, and every decision read from
it, is the same on every rank. A phase's share is fixed when it starts: what is left of the budget, in proportion
to its planned steps among those of the phases still to run, so that time a phase leaves unused (an early stop) goes
to the later ones. A phase ends at the next step, as an early stop does (validation pass, checkpoint), once that
step would no longer fit in its share: once the seconds it used and the longest step of this attempt so far (with
its log, validation and save: about what the ending step costs) reach the share. Its index joins
``TrainerState.time_stopped``: a resume never runs it again. Until 2026-12-05 a phase ended at the step after its
share was used, so the run overran its budget by one step with a validation pass and a save (a minute at 8B).
"""
from __future__ import annotations

import time


def phase_share(budget_s: float, used_at_start: float, phase_steps: list[int], index: int) -> float:
    """Seconds phase ``index`` may train: the budget left when it started (``used_at_start`` spent by then) times
    its planned steps over those of phases ``index`` and later."""
    left = max(0.0, budget_s - used_at_start)
    rest = sum(phase_steps[index:])
    return left * phase_steps[index] / rest if rest > 0 else left


def share_used(budget_s: float, state, phase_steps: list[int], reserve: float = 0.0) -> bool:
    """Whether the current phase (``state``: the trainer's phase_index, train_seconds and phase_start_seconds)
    has used its share, keeping ``reserve`` seconds for the step that ends it; never with the budget off
    (``budget_s`` 0)."""
    if budget_s <= 0:
        return False
    share = phase_share(budget_s, state.phase_start_seconds, phase_steps, state.phase_index)
    return state.train_seconds - state.phase_start_seconds + reserve >= share


class TimeBudget:
    """The trainer's side of the budget: ``minutes`` (guard.max_train_minutes; 0 = off) over ``phases`` (the run
    config's), read and written in the trainer's ``TrainerState``. ``up``: the current phase has used its share
    (less ``longest``, this attempt's slowest step), so it ends at the next step (``stop_here``)."""

    def __init__(self, minutes: float, phases: list):
        self.budget_s = minutes * 60
        self.steps, self.names = [p.steps for p in phases], [p.name for p in phases]
        self.up = False
        self.tick = 0.0  # perf_counter() at the last lap
        self.longest = 0.0  # the slowest step of this attempt (the slowest rank's, with its validation and save)

    def start_loop(self, state) -> None:
        """The training loop starts (a first start or a resume): its time counts from now."""
        self.tick = time.perf_counter()
        self.check(state)

    def lap(self) -> float:
        """This rank's seconds since the last lap (or the loop's start): one step with its log, validation and
        save, for the per-step exchange, whose maximum over the ranks goes to ``add``."""
        now = time.perf_counter()
        seconds, self.tick = now - self.tick, now
        return seconds

    def check(self, state) -> None:
        """At the loop's start and a phase's start (the share may be nothing by then), and after each step."""
        self.up = share_used(self.budget_s, state, self.steps, self.longest)

    def add(self, state, seconds: float) -> None:
        """Count one step's ``seconds`` (the slowest rank's); off, nothing is counted, so the checkpoints hold no
        clock reading and reruns save the same bits."""
        if self.budget_s:
            state.train_seconds += seconds
            self.longest = max(self.longest, seconds)
            self.check(state)

    def start_phase(self, state) -> None:
        state.phase_start_seconds = state.train_seconds  # the new phase's share is fixed now
        self.check(state)

    def stop_here(self, state) -> str | None:
        """End the current phase at this step when the last step found its share used, or too little of it left for
        this attempt's longest step (the same on every rank): marks it in ``state.time_stopped`` and returns the
        line to log; None otherwise, and at the phase's last planned step, which ends it anyway."""
        i = state.phase_index
        if not self.up or state.phase_step >= self.steps[i]:
            return None
        state.time_stopped.append(i)
        share = phase_share(self.budget_s, state.phase_start_seconds, self.steps, i)
        budget = f"guard.max_train_minutes={self.budget_s / 60:g}"
        trained = state.train_seconds - state.phase_start_seconds
        kept = (f" (the {share - trained:.1f} s left would not hold its longest step, {self.longest:.1f} s with "
                "validation and save)" if trained < share else "")
        used = (f"it trained {trained:.1f} s of its {share:.1f} s share of {budget}{kept}" if share
                else f"the earlier phases had used all of {budget}")
        then = f"phase '{self.names[i + 1]}' starts next" if i + 1 < len(self.names) else "the run ends"
        return (f"time budget: phase '{self.names[i]}' ends at its step {state.phase_step} of {self.steps[i]} "
                f"(global step {state.global_step}): {used}; {then}")

    def status(self, state) -> dict:
        """status.json's fields: the seconds and the phases it ended; none with the budget off."""
        if not self.budget_s:
            return {}
        return {"train_seconds": round(state.train_seconds, 1),
                "time_stopped": [self.names[i] for i in state.time_stopped]}
