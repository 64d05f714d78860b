"""Preemption: SIGUSR1 (SLURM's ``--signal=B:USR1@grace``) or SIGTERM asks the run to checkpoint and exit.

A signal may reach the ranks at different steps; the trainer shares each rank's flag in its per-step host
exchange (``guards.RankExchange``), so that all ranks stop after the same step.
"""
from __future__ import annotations

import signal

PREEMPTED_EXIT_CODE = 124  # launch/slurm.sbatch requeues the job on this status


class Preempted(Exception):
    """Raised after the preemption checkpoint is complete."""


class PreemptionWatcher:
    def __init__(self, signals=(signal.SIGUSR1, signal.SIGTERM)):
        self.received: int | None = None
        for sig in signals:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.received = signum

    @property
    def requested(self) -> bool:
        return self.received is not None
