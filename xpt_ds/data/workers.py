"""The DataLoader worker processes of a batch stream: forked once, early, and kept for the run.

A rank forks its DataLoader workers. Forking while other threads of the process run is unsafe in the CPython
releases that have gh-112275 (3.8-3.11 before 3.8.20, 3.9.20, 3.10.15 and 3.11.10, all of September 2024): the
child deadlocks in its after-fork cleanup (``PyOS_AfterFork_Child``) when another thread held the interpreter's
thread-list lock at the instant of the fork. A rank that trains has such threads. gloo's (``pt_gloo_runloop``)
destroy the collectives they finished, and destroying a tensor whose Python object is gone takes the GIL from that
thread, which creates a thread state under that lock (seen with gdb in a ZeRO-3 rank, hundreds of times a
minute). A ZeRO-3 rank's validation worker deadlocked so, and its job with it, in 2 of 3 test-suite runs on
Python 3.11.7.

So a stream's workers are forked once (``Workers.fork``), at the end of the trainer's build: the engine does not
exist yet, and the build's own collectives (a few small agreements between ranks) ended before the model was
built. They live for the run (torch's ``persistent_workers``).
The sequence an iteration starts at is an integer in shared memory (with a blend of corpora, each corpus's offset
beside it: ``xpt_ds.data.mixture``), which a worker reads when an iteration starts;
``Workers.run`` sets it and restarts the same processes, for a new validation pass, a resume or a rewind. Workers
forked before it is set build nothing. A stall from any cause is still handled by ``MLMBatchStream``, which shuts
stalled workers down and forks new ones.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import multiprocessing.queues
import os
import signal
import sys
from itertools import count
from typing import Callable, Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from xpt_ds.data.shards import DataError
from xpt_ds.errors import error_line
from xpt_ds.runtime import open_files

UNSET = -1  # the start of workers forked before their first iteration: they produce nothing
RAN_OUT = errno.EMFILE  # a worker's fault flag: it ran out of file descriptors handing a batch over


class WorkerFailure:
    """A DataError (or OSError) in a DataLoader worker, passed on as an item: torch would re-raise it in the main
    process with the worker's traceback in its message (torch.utils.data._utils.ExceptionWrapper), and the user
    would see that instead of the one line that names the shard."""

    def __init__(self, message: str):
        self.message = message


def start_worker(worker_id: int) -> None:
    """A DataLoader worker's start: it ignores SIGTERM, SIGUSR1 and SIGINT, and dies with its rank.

    A scheduler's SIGTERM (a Slurm time limit, preemption, ``scancel``, ``kill -TERM`` of the process group)
    reaches the workers too; a worker that dies of it makes torch's SIGCHLD handler raise in the rank, in the middle
    of the preemption checkpoint. The rank alone decides to stop, and then shuts its workers down
    (``MLMBatchStream.close``). A rank that is killed (``kill -9``, the out-of-memory killer) cannot: its workers
    lived on for up to torch's 5 s check of their parent, holding their memory and the run directory's lock
    (``xpt_ds.runtime.run_lock``), so that a job restarted at once was refused. The kernel kills them with it now
    (``PR_SET_PDEATHSIG``: the death of the thread that forked them, the rank's main thread, ``Workers.fork``)."""
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    die_with_parent()


_FORKED_BY: int | None = None  # the pid of the rank that forks the workers (``Workers.run``), which they inherit


def die_with_parent() -> None:
    """SIGKILL to this process when its parent ends (Linux; elsewhere torch's own check of the parent remains). A
    parent that ended before the request (a worker scheduled late, under load) sends nothing: the worker ends at
    once then. Its parent is the pid the rank recorded before forking it, not ``getppid()`` here, after the fork,
    where a parent already gone reads as its reaper's pid (such a worker would live on up to 5 s)."""
    parent = _FORKED_BY if _FORKED_BY is not None else os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)


def quiet_when_out_of_files(fault: torch.Tensor) -> None:
    """In a DataLoader worker: running out of file descriptors while handing a batch over sets ``fault`` (shared
    with the rank) and ends the worker at once, silently. torch shares each tensor through a descriptor
    (``file_descriptor`` strategy): the queue's feeder thread (``reduce_storage`` -> ``DupFd``) and
    ``multiprocessing.resource_sharer``'s thread fail with EMFILE, print their tracebacks (30 lines between
    them) and drop the batch, which the rank then waits for. Now the rank, once torch notices the worker gone (at
    its next check of its workers: the end of the DataLoader's timeout, a stream's ``worker_timeout_s``, unless
    the rank ran out itself first), reads the flag and ends with one line (``MLMBatchStream``). ``os._exit``
    also skips the exit-time clean-up (multiprocessing's temporary folder) that fails, and prints, for the same
    want. Idempotent; installed before the worker's first batch, so before the feeder thread starts (it binds the
    hook then)."""
    if getattr(multiprocessing.queues.Queue._on_queue_feeder_error, "xpt_ds_fault", None) is fault:
        return
    default_feeder, default_hook = multiprocessing.queues.Queue._on_queue_feeder_error, sys.excepthook

    def ran_out(e: BaseException) -> None:
        if open_files.ran_out(e):  # torch's shared-memory open says it in a RuntimeError, with no errno
            fault[0] = RAN_OUT
            os._exit(0)  # 0: torch's SIGCHLD handler raises anywhere in the rank for another status

    def on_feeder_error(e, obj):
        ran_out(e)
        default_feeder(e, obj)

    def excepthook(kind, e, tb):  # resource_sharer's server thread reports through sys.excepthook
        ran_out(e)
        default_hook(kind, e, tb)

    on_feeder_error.xpt_ds_fault = fault
    multiprocessing.queues.Queue._on_queue_feeder_error = staticmethod(on_feeder_error)  # this worker process only
    sys.excepthook = excepthook


class BatchDataset(IterableDataset):
    """Batches ``plan(first, *rest).batch(b)`` for this worker's b (w, w + W, ...), ``first`` and ``rest`` read
    from ``start`` when an iteration starts; ``plan(...).n_batches`` ends a single pass (None: never). ``fault``:
    set by a worker that ran out of file descriptors (``quiet_when_out_of_files``)."""

    def __init__(self, plan: Callable[..., object], start: torch.Tensor, fault: torch.Tensor | None = None):
        self.plan, self.start = plan, start
        self.fault = torch.zeros(1, dtype=torch.int64) if fault is None else fault

    def __iter__(self):
        info = get_worker_info()
        if info is not None:
            quiet_when_out_of_files(self.fault)
        first, *rest = self.start.tolist()
        if first == UNSET:
            return
        w, W = (info.id, info.num_workers) if info else (0, 1)
        plan = self.plan(first, *rest)
        stop = plan.n_batches
        for b in count(w, W):
            if stop is not None and b >= stop:
                return
            try:
                batch = plan.batch(b)
            except (DataError, OSError) as e:  # a corrupt shard; a shard gone or unreadable since the scan
                if info is None:
                    raise
                yield WorkerFailure(error_line(e))
                return
            yield batch


class Workers:
    """``num_workers`` processes (0: the batches are built in the calling process) building the batches of
    ``plan``; ``timeout``: seconds ``next`` waits for a batch before torch raises ``DataLoader timed out``;
    ``width``: the integers ``plan`` takes."""

    def __init__(self, plan: Callable[..., object], num_workers: int, timeout: float,
                 worker_init_fn: Callable[[int], None] | None = None, width: int = 1):
        self.start = torch.full((width,), UNSET, dtype=torch.int64)
        self.fault = torch.zeros(1, dtype=torch.int64)  # RAN_OUT: a worker ran out of file descriptors
        if num_workers:
            self.start.share_memory_()  # a forked worker reads what run() writes later
            self.fault.share_memory_()
        self.dataset = BatchDataset(plan, self.start, self.fault)
        self.num_workers, self.timeout, self.worker_init_fn = num_workers, timeout, worker_init_fn
        self._loader: DataLoader | None = None

    def _make_loader(self) -> DataLoader:
        # Own generator: a DataLoader iterator otherwise draws its base seed from the global RNG, which
        # would shift the dropout stream whenever the iterator is (re)created, e.g. after a resume.
        # Pinned host batches: the trainer's non_blocking copy to a CUDA device is then truly asynchronous.
        n = self.num_workers
        return DataLoader(self.dataset, batch_size=None, num_workers=n, generator=torch.Generator(),
                          prefetch_factor=4 if n else None, pin_memory=torch.cuda.is_available(),
                          worker_init_fn=self.worker_init_fn if n else None, timeout=self.timeout if n else 0,
                          persistent_workers=n > 0)

    def fork(self) -> None:
        """Start the worker processes now, idle until ``run``; nothing if they run already."""
        if self.num_workers and self._loader is None:
            self.run(UNSET)

    def run(self, first: int, *rest: int) -> Iterator:
        """The batches from sequence ``first`` on (``rest``: the plan's other integers). The first call forks the
        workers (unless ``fork`` did); later calls restart the same processes, which drop what they prefetched."""
        global _FORKED_BY
        self.start[:] = torch.tensor([first, *rest] if first != UNSET else [UNSET] * len(self.start))
        if self._loader is None:
            self._loader = self._make_loader()
        _FORKED_BY = os.getpid()  # what a worker forked now compares its parent with (die_with_parent)
        return iter(self._loader)

    @property
    def ran_out_of_files(self) -> bool:
        """Whether a worker ended for want of file descriptors (``quiet_when_out_of_files``)."""
        return int(self.fault[0]) == RAN_OUT

    def close(self) -> None:
        """Shut the worker processes down (they ignore stop signals, so they wait to be told); a later ``run``
        forks new ones."""
        loader, self._loader = self._loader, None
        it = getattr(loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
