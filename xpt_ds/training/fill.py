"""Filling an engine built on an empty skeleton: every parameter set once, from whatever holds its values.

The trainer builds each phase's engine on a module without values (``xpt_ds.model.skeleton``: empty storage in
the compute dtype at ZeRO 0-2, ``deepspeed.zero.Init`` partitions at ZeRO-3), then ``fill`` asks a values function
for each parameter's exact fp32 value in turn (a fresh run's ``xpt_ds.model.values.plan.PlanValues``, a checkpoint's
frozen file, the previous phase's ``hand_over``) and puts it where the engine keeps it: the module's copy in its dtype
(at ZeRO-3 only this rank's partition), the fp32 master of a trainable parameter, and for a frozen one the
``FrozenWeights`` record. One value exists at a time, so no rank holds more than its share plus one tensor.

A fresh start also checks that the ranks built the same model (another library version on one node, a copy of
the source that differs): each rank's crc32 over every name and value is compared (one gather); if any differs,
rank 0's values are broadcast and the ranks that differed are named.
"""
from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable

import deepspeed
import torch
from deepspeed.utils import safe_get_full_fp32_param, safe_set_full_fp32_param

from xpt_ds.checkpoint.frozen import FrozenWeights, ShardedValues
from xpt_ds.model.skeleton import full_shape
from xpt_ds.runtime.host_memory import release_freed

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 10.0


@torch.no_grad()
def write_module(param: torch.nn.Parameter, value: torch.Tensor) -> None:
    """The module's copy of ``param`` := ``value`` (fp32, whole) in its dtype: at ZeRO-3 this rank's partition."""
    if hasattr(param, "ds_tensor"):
        _copy_partition(param.ds_tensor.data, value, torch.distributed.get_rank(group=param.ds_process_group))
        if param.numel() == value.numel():  # gathered (a persistent small parameter): its whole copy too
            param.data.copy_(value.reshape(param.shape))
        return
    param.data.copy_(value.reshape(param.shape))


def write_master(param: torch.nn.Parameter, value: torch.Tensor) -> None:
    """A trainable parameter's fp32 master := ``value`` (ZeRO 1-3, which copy the slice they hold from it; at stage
    0 the module's copy is the master)."""
    if hasattr(param, "ds_id"):
        _write_zero3_master(param, value)
    elif hasattr(param, "_hp_mapping"):
        safe_set_full_fp32_param(param, value)


@torch.no_grad()
def _write_zero3_master(param: torch.nn.Parameter, value: torch.Tensor) -> None:
    """This rank's slice of a ZeRO-3 parameter's fp32 master, its padding zero, as ``write_module`` writes the
    module's. DeepSpeed 0.19.8's ``set_full_hp_param`` takes a whole partition from ``rank x partition`` of the
    value, past its end on the last rank where the world size does not divide the parameter's size (12,800 values
    on 3 ranks; a 2,048-wide norm on 6 GPUs): every fill there stopped with a RuntimeError."""
    if not param.requires_grad:
        return
    optimizer = param._z3_optimizer
    part, group = optimizer._get_fp32_opt_state_partition(param, release_swap_buffers=False)
    _copy_partition(part, value, optimizer._get_param_partition_rank(param))
    if optimizer._swappable_optimizer_subgroup(group):
        optimizer._optimizer_states_and_gradient_swap_out(group)


def _copy_partition(part: torch.Tensor, value: torch.Tensor, rank: int) -> None:
    """``part`` := rank ``rank``'s partition of ``value`` flattened (ZeRO-3's layout: equal partitions, the last
    one's tail past the value padding), its padding zero."""
    flat = value.reshape(-1)
    size = part.numel()
    lo = min(rank * size, flat.numel())
    n = min(size, flat.numel() - lo)
    part[:n].copy_(flat[lo:lo + n])
    part[n:].zero_()


class Digest:
    """crc32 over names, shapes and fp32 bytes, in fill order (3 GB/s: blake2b would add seconds per GB)."""

    def __init__(self):
        self.crc = 0

    def update(self, name: str, value: torch.Tensor) -> None:
        self.crc = zlib.crc32(f"{name}:{tuple(value.shape)};".encode(), self.crc)
        data = value.detach().contiguous().reshape(-1)
        if data.numel():
            self.crc = zlib.crc32(data.view(torch.uint8).numpy().data, self.crc)

    def hex(self) -> str:
        return f"{self.crc:08x}"


class Progress:
    """Rank 0's line every PROGRESS_EVERY_S while a fill runs, and one when it ends."""

    def __init__(self, what: str, total: int, rank: int):
        self.what, self.total, self.rank = what, total, rank
        self.started = self.last = time.perf_counter()
        self.done = self.bytes = 0

    def step(self, value: torch.Tensor) -> None:
        self.done += 1
        self.bytes += value.numel() * 4
        now = time.perf_counter()
        if self.rank == 0 and now - self.last >= PROGRESS_EVERY_S:
            log.info("%s: %d of %d parameters (%.1f GB fp32), %.0f s", self.what, self.done, self.total,
                     self.bytes / 1e9, now - self.started)
            self.last = now

    def end(self) -> float:
        seconds = time.perf_counter() - self.started
        if self.rank == 0:
            log.info("%s: %d parameters (%.1f GB fp32) in %.1f s", self.what, self.done, self.bytes / 1e9, seconds)
        return seconds


def fill(engine, values: Callable[[str], torch.Tensor], trainable: set[str], frozen: FrozenWeights,
         what: str, names: set[str] | None = None, digest: Digest | None = None) -> None:
    """Set every parameter of ``engine.module`` (module-relative names), or only ``names``, from ``values(name)``
    (exact fp32, whole; every rank calls in the same order when ``values`` is collective): the module's copy, the
    master of a ``trainable`` one, else ``frozen``'s record."""
    params = [(n, p) for n, p in engine.module.named_parameters() if names is None or n in names]
    progress = Progress(what, len(params), torch.distributed.get_rank())
    for name, p in params:
        value = values(name)
        if tuple(value.shape) != full_shape(p):
            raise ValueError(f"{what}: {name} has shape {tuple(value.shape)}, the model's is {full_shape(p)}")
        value = value.to(torch.float32)
        if digest is not None:
            digest.update(name, value)
        write_module(p, value)
        if name in trainable:
            write_master(p, value)
        else:
            frozen.keep(name, value, p)
        progress.step(value)
        del value
    progress.end()


def agree_or_broadcast(engine, values: Callable[[str], torch.Tensor], trainable: set[str], frozen: FrozenWeights,
                       digest: Digest) -> None:
    """Make every rank start from rank 0's values: compare the fills' digests (one gather); where they differ, rank
    0's values are broadcast, one parameter at a time, and filled again on every rank, and the ranks that differed
    are named in a warning."""
    world, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
    digests = [None] * world
    torch.distributed.all_gather_object(digests, digest.hex())
    differ = [r for r, d in enumerate(digests) if d != digests[0]]
    if rank == 0:
        if differ:
            log.warning("initial weights differ from rank 0's on rank(s) %s; using rank 0's on every rank",
                        ", ".join(map(str, differ)))
        else:
            log.info("initial weights identical on all %d rank(s) (crc32 %s)", world, digests[0])
    if not differ:
        return
    device = deepspeed.get_accelerator().current_device_name()

    def broadcast(name: str) -> torch.Tensor:
        p = engine.module.get_parameter(name)
        value = values(name).to(device) if rank == 0 else torch.empty(full_shape(p), device=device)
        deepspeed.comm.broadcast(value, src=0)
        return value.cpu()
    fill(engine, broadcast, trainable, frozen, "initial weights from rank 0")


def fill_fresh(engine, plan, trainable: set[str], frozen: FrozenWeights) -> None:
    """A fresh start: every value from ``plan`` (``xpt_ds.model.build.BuildPlan``, HF names under the engine's
    ``hf.``), the ranks' values compared (``agree_or_broadcast``); the plan is closed and its temporaries freed."""
    digest = Digest()
    values = lambda name: plan.values(name.removeprefix("hf."))  # noqa: E731
    fill(engine, values, trainable, frozen, "initial weights", digest=digest)
    agree_or_broadcast(engine, values, trainable, frozen, digest)
    plan.close()
    release_freed()  # the source reads' temporaries


def engine_values(engine, frozen: FrozenWeights) -> Callable[[str], torch.Tensor]:
    """Every parameter's exact fp32 value, whole, on the CPU (collective under ZeRO: call on every rank in the same
    order): a frozen one's from ``frozen``, a trainable one's master."""
    params = dict(engine.module.named_parameters())

    def value(name: str) -> torch.Tensor:
        if name in frozen:
            return frozen.full(name)
        p = params[name]
        master = safe_get_full_fp32_param(p)
        return (p.data if master is None else master).detach().float().cpu()
    return value


def hand_over(engine, frozen: FrozenWeights) -> ShardedValues:
    """What a phase ends with, for the next phase's engine: the frozen values as ``frozen`` keeps them, and each
    trainable parameter's master as this rank's slice of it (collective), so that after ``engine.destroy()`` this
    rank holds its share of the model and nothing more."""
    out = ShardedValues()
    value = engine_values(engine, frozen)
    for name, _ in engine.module.named_parameters():
        if name in frozen:
            out.take(frozen, name)
        else:
            out.keep_slice(name, value(name))
    return out
