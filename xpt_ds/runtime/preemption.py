"""Preemption: SIGUSR1 (SLURM's ``--signal=B:USR1@grace``) or SIGTERM asks the run to checkpoint and exit.

A signal may reach the ranks at different steps; the trainer shares each rank's flag in its per-step host
exchange (``guards.RankExchange``), so that all ranks stop after the same step.

Ctrl-C (SIGINT, to the whole foreground process group: a run, or a sweep and its runs) asks the same, once: the
run checkpoints after the current step, status.json says 'interrupted', and it exits 130
(``errors.INTERRUPTED_EXIT_CODE``). A second Ctrl-C stops at once, without a checkpoint: a KeyboardInterrupt
wherever the main thread is, even inside a save. A save is complete only once its ``COMPLETE`` marker is written,
last (``checkpoint.save``), so a save cut short leaves a tag that does not count and the newest complete checkpoint
stays the newest; ``xpt_ds.cli.train`` then records 'interrupted' (with the newest complete checkpoint) and exits 130
too.
"""
from __future__ import annotations

import signal

from xpt_ds.errors import say

PREEMPTED_EXIT_CODE = 124  # launch/slurm.sbatch requeues the job on this status
INTERRUPT_LINE = ("interrupt: stopping after this step with a checkpoint; press Ctrl-C again to stop now without "
                  "one")


class Preempted(Exception):
    """Raised after the preemption checkpoint is complete."""


class PreemptionWatcher:
    def __init__(self, signals=(signal.SIGUSR1, signal.SIGTERM), rank: int = 0):
        self.received: int | None = None  # the first stop signal
        self.interrupts = 0  # Ctrl-Cs so far
        self.rank = rank
        for sig in signals:
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGINT, self._on_interrupt)

    def _on_signal(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum

    def _on_interrupt(self, signum, frame) -> None:
        """The first Ctrl-C asks for the checkpoint (unless a SIGTERM or SIGUSR1 already did: a launcher that got
        the same Ctrl-C may pass it on as SIGTERM first); the second stops at once."""
        self.interrupts += 1
        if self.interrupts > 1:
            raise KeyboardInterrupt
        self._on_signal(signum, frame)
        if self.rank == 0:
            say(INTERRUPT_LINE)

    @property
    def requested(self) -> bool:
        return self.received is not None

    @property
    def interrupted(self) -> bool:
        """The first stop signal this rank received was Ctrl-C."""
        return self.received == signal.SIGINT

    @property
    def level(self) -> float:
        """What the ranks exchange each step: 0 no stop asked, 1 a scheduler's stop, 2 Ctrl-C (which then wins on
        every rank: the job says 'interrupted' and exits 130 everywhere, wherever the Ctrl-C landed)."""
        return 2.0 if self.interrupted else float(self.requested)
