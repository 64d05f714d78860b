"""Preemption: SIGUSR1 (SLURM's ``--signal=B:USR1@grace``) or SIGTERM asks the run to checkpoint and exit.

A signal may reach the ranks at different steps, so the ranks agree once per step: a one-element
all-reduce (MAX) over a gloo group on the host, which adds no device synchronisation.
"""
from __future__ import annotations

import signal

import torch
import torch.distributed as dist

PREEMPTED_EXIT_CODE = 124  # launch/slurm.sbatch requeues the job on this status


class Preempted(Exception):
    """Raised after the preemption checkpoint is complete."""


class PreemptionWatcher:
    def __init__(self, signals=(signal.SIGUSR1, signal.SIGTERM)):
        self.received: int | None = None
        for sig in signals:
            signal.signal(sig, self._on_signal)
        world = dist.get_world_size() if dist.is_initialized() else 1
        self.group = dist.new_group(backend="gloo") if world > 1 else None

    def _on_signal(self, signum, frame) -> None:
        self.received = signum

    def should_stop(self) -> bool:
        """True on every rank once any rank has received a signal (collective: call on all ranks)."""
        flag = torch.tensor([0 if self.received is None else 1], dtype=torch.int32)
        if self.group is not None:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())
