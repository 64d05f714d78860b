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

A stop signal that comes while the command still starts (imports, the process group, the build) is recorded from
the top of ``xpt_ds.cli.train.main`` on (``record_stops``): the watcher takes it over, and a stop asked for before
training starts ends the run there, with nothing to save (status 124; 130 for a Ctrl-C the watcher saw). Until the
watcher is installed, Ctrl-C is a KeyboardInterrupt, as before. ``interrupts_deferred``: while the run shuts down,
a Ctrl-C is counted, not raised.

A rank that a launcher started (torchrun's agent, DeepSpeed's per-node ``launch.py``: its parent, recorded by
``record_stops``) stops the same way once that parent is gone (``kill -9`` of the launcher, the out-of-memory
killer): a launcher runs its ranks in sessions of their own (torchrun), so its death reaches none of them, which
would train on with nobody to stop them, holding their GPUs and the run directory's lock. A process
started otherwise (a shell, ``nohup``, one srun task a GPU) has no launcher to watch: its parent may end as it likes.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading

from xpt_ds.errors import say

PREEMPTED_EXIT_CODE = 124  # launch/slurm.sbatch requeues the job on this status
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
_recorded: list[int] = []  # the stop signals that came before the watcher was installed (record_stops)
_before: dict = {}  # the handlers record_stops replaced (release_stops)
_launcher: list[int] = []  # the pid of the launcher that started this rank, if one did (record_stops)
INTERRUPT_LINE = ("interrupt: stopping after this step with a checkpoint; press Ctrl-C again to stop now without "
                  "one")


class Preempted(Exception):
    """Raised after the preemption checkpoint is complete."""


def _record(signum, frame) -> None:
    _recorded.append(signum)


def record_stops() -> None:
    """From now on a stop signal (SIGUSR1, SIGTERM) is recorded, not fatal, until a ``PreemptionWatcher`` takes it
    over: a rank that Slurm or a launcher stops while it starts then exits as preempted (124), not killed (143).
    Only the main thread can install handlers: elsewhere (an in-process caller's thread) nothing changes."""
    _recorded.clear()
    _launcher[:] = [os.getppid()] if launched() else []
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            _before[sig] = signal.signal(sig, _record)


def launched() -> bool:
    """Whether a launcher started this process as a rank, and is its parent: torchrun (``TORCHELASTIC_RUN_ID``) or
    DeepSpeed's per-node ``launch.py`` (``LOCAL_SIZE``), each with ``LOCAL_RANK``."""
    env = os.environ
    return "LOCAL_RANK" in env and ("TORCHELASTIC_RUN_ID" in env or "LOCAL_SIZE" in env)


def release_stops() -> None:
    """The handlers ``record_stops`` replaced back, where no watcher took them over (the command ended before
    training: a config error): an in-process caller (the ``xpt-ds`` dispatcher, a test) is stopped by them again."""
    if threading.current_thread() is threading.main_thread():
        for sig, handler in _before.items():
            if signal.getsignal(sig) is _record:
                signal.signal(sig, handler)
    _before.clear()


@contextlib.contextmanager
def interrupts_deferred():
    """Within the block a Ctrl-C (SIGINT) is counted in the list it yields, not raised: what the block does (the
    run's shutdown: its DataLoader workers, which ignore stop signals, and the process group) is not cut short.
    A handler swap, not ``signal.pthread_sigmask``: with SIGINT blocked in the main thread the kernel hands it to
    another thread (gloo's, the status heartbeat), and Python still runs the handler in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    counted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: counted.append(signum))
    try:
        yield counted
    finally:
        signal.signal(signal.SIGINT, previous)


class PreemptionWatcher:
    def __init__(self, signals=STOP_SIGNALS, rank: int = 0):
        self.received: int | None = None  # the first stop signal
        self.interrupts = 0  # Ctrl-Cs so far
        self.rank = rank
        self.launcher = _launcher[0] if _launcher else None  # the parent whose end stops the run
        for sig in signals:
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGINT, self._on_interrupt)
        if _recorded:  # one that came while the command started (record_stops), read once this watcher has them
            self.received = _recorded[0]
            _recorded.clear()

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
        if self.received is None and self.launcher is not None and os.getppid() != self.launcher:
            self.received = signal.SIGTERM  # the launcher is gone: as if it had passed on a SIGTERM
            if os.environ.get("LOCAL_RANK") == "0":
                say(f"the launcher (pid {self.launcher}) that started this rank is gone: stopping after this step "
                    "with a checkpoint, as on SIGTERM")
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
