"""Joining the job's process group, and the shared memory DeepSpeed's CPU all-reduce leaves behind.

On the CPU accelerator, when every rank is on one machine (the ``deepspeed`` launcher sets ``LOCAL_SIZE``),
DeepSpeed 0.19's shared-memory all-reduce (``ShareMemCommBuilder``, ``csrc/cpu/comm/shm.cpp``) creates one
64 MiB file per rank, ``/dev/shm/deepspeed_allreduce_buffer_{uid}_{MASTER_ADDR}_{MASTER_PORT}_{rank}``, maps every
rank's, and never unlinks them: each such run left 64 MiB per rank in RAM-backed ``/dev/shm`` for good (a
machine that ran the test suite a few times held 18 GB). Once every rank has returned from ``init_distributed``,
every rank has mapped every other's file, so the names can go: a mapping outlives its name, and the memory is
freed when the last process exits.

The job's collective timeout (``guard.collective_timeout_s``) bounds every group of the job, not only the default
one: ``torch.distributed.new_group`` without ``timeout=`` gives a gloo group torch's 30 minutes whatever the default
group's timeout, and DeepSpeed makes its groups that way (``deepspeed.comm.new_group(ranks)`` passes none), the
clone of the world group its engine's collectives run on among them (``deepspeed.utils.groups._clone_world_group``:
ZeRO's gradient all-reduce, the gradient norm). A hung rank then held the others in those for 30 minutes.
``init_distributed`` makes DeepSpeed's communication backend pass the timeout to every group it makes
(``_bound_deepspeed_groups``), and the trainer's own groups pass ``collective_timeout()``.
"""
from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from pathlib import Path
from typing import Callable

import deepspeed
from deepspeed.constants import default_pg_timeout

from xpt_ds.errors import UserError
from xpt_ds.runtime.op_builds import check_build_lock

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "deepspeed_allreduce_buffer"

_timeout: timedelta | None = None  # what init_distributed gave the job's groups


def collective_timeout() -> timedelta | None:
    """The timeout of the job's collectives (``init_distributed``), for a group the trainer makes itself:
    ``dist.new_group(..., timeout=collective_timeout())``. None before ``init_distributed`` (torch's default)."""
    return _timeout


def init_distributed(timeout_s: float = 0) -> None:
    """``deepspeed.init_distributed``, then unlink this rank's shared-memory all-reduce buffer (if it made one).
    On the CPU accelerator DeepSpeed loads that all-reduce's op as it joins: a stale build lock stops it first.
    ``timeout_s`` (``guard.collective_timeout_s``): how long a collective of the job's group, and of every group
    DeepSpeed makes from now on, may wait for a rank; 0 = DeepSpeed's default (``DEEPSPEED_TIMEOUT`` minutes, 10
    unless set)."""
    global _timeout
    if deepspeed.get_accelerator().device_name() == "cpu":
        check_build_lock("ShareMemCommBuilder")
    _timeout = timedelta(seconds=timeout_s) if timeout_s else default_pg_timeout
    deepspeed.init_distributed(dist_init_required=True, timeout=_timeout)
    _bound_deepspeed_groups(_timeout)
    if deepspeed.get_accelerator().device_name() != "cpu":
        return
    deepspeed.comm.barrier()  # every rank has opened every other's buffer
    name = (f"{SHM_PREFIX}_{os.getuid()}_{os.environ.get('MASTER_ADDR', '')}_{os.environ.get('MASTER_PORT', '')}_"
            f"{deepspeed.comm.get_rank()}")
    with contextlib.suppress(FileNotFoundError):
        (SHM_DIR / name).unlink()


def _bound_deepspeed_groups(timeout: timedelta) -> None:
    """Every group DeepSpeed makes from now on (its world clone, ZeRO's, pipeline and expert groups) gets
    ``timeout``, as the default group has. DeepSpeed makes them all with ``deepspeed.comm.new_group(ranks)``, which
    calls its communication backend's ``new_group(ranks)``, which is ``torch.distributed.new_group(ranks)``
    (DeepSpeed 0.19) and so gets torch's default (30 minutes for gloo): this process's backend object gets a
    ``new_group`` that passes ``timeout`` (one the caller gives wins). Nothing outside DeepSpeed changes; a group
    made before this (none: DeepSpeed makes its first in ``deepspeed.initialize``) keeps its timeout."""
    import torch.distributed as dist
    from deepspeed.comm import comm

    def new_group(ranks=None, *args, **kwargs):
        kwargs.setdefault("timeout", timeout)
        return dist.new_group(ranks, *args, **kwargs)

    comm.cdb.new_group = new_group


# What a collective raises on a rank whose peer died (kill -9, a node lost, an out-of-memory kill): gloo's TCP pair
# ("Read error [addr]: Connection reset by peer", "Connection closed by peer") as a RuntimeError; NCCL and the
# store as torch.distributed.DistError.
_PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "gloo/transport")


def lost_peer(e: BaseException) -> bool:
    """Whether ``e`` is this rank's collective failing because another rank of the job is gone."""
    import torch.distributed as dist
    return isinstance(e, dist.DistError) or (isinstance(e, RuntimeError) and any(m in str(e) for m in _PEER_LOST))


def lost_peer_line(e: BaseException, newest: str | None) -> str:
    """The one line a rank says when another rank is gone: what the collective said (its first sentence, without
    gloo's source path), and how to go on."""
    said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    said = said.split("] ", 1)[1] if said.startswith("[") and "] " in said else said
    said = said.split(". ")[0].rstrip(".")
    where = f"checkpoint {newest}" if newest else "the newest complete checkpoint"
    if "timed out" in said.lower():  # gloo: "Timed out waiting 600000ms for recv operation to complete"
        return (f"a collective of this job timed out waiting for another rank ({said}): a rank hung, or works alone "
                f"for longer than guard.collective_timeout_s allows, and its own output says where; the same "
                f"command resumes from {where}")
    return (f"lost another rank of this job ({said}): a rank or node died, and its own output says why; the same "
            f"command resumes from {where}")


def rank0_alone(work: Callable[[], None], limit_s: float, error: type[UserError]) -> None:
    """Run ``work`` on rank 0 while every other rank waits for it, for up to ``limit_s`` seconds and a minute more.
    They wait in a broadcast of a gloo group made for this wait, with that timeout, not in a collective of the
    job's group: its timeout (``guard.collective_timeout_s``, DeepSpeed's 10 minutes by default) is for a rank that
    hangs, and a long task of one rank outlasts it (NCCL's watchdog then ends every waiting rank). A UserError or
    OSError of ``work`` is raised on rank 0 as it was and on every other rank as ``error`` with its message."""
    import torch.distributed as dist
    if dist.get_world_size() == 1:
        work()
        return
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=limit_s + 60))
    failed, said = None, [None]
    try:
        if dist.get_rank() == 0:
            try:
                work()
            except (UserError, OSError) as e:
                failed, said = e, [str(e)]
        dist.broadcast_object_list(said, src=0, group=group)
    finally:
        with contextlib.suppress(RuntimeError, ValueError):  # after a failed broadcast: its error is the one to say
            dist.destroy_process_group(group)
    if failed is not None:
        raise failed
    if said[0] is not None:
        raise error(said[0])
