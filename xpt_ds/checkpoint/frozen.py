"""Exact fp32 values of parameters beside a DeepSpeed engine, each kept where it costs least.

The engine holds a parameter it does not train only in its compute dtype, with no fp32 master, so the exact fp32
value of each frozen parameter is kept beside it: for the phase hand-over, for checkpoints
(``frozen_fp32.safetensors``) and for a resume. Where the engine's own copy is exact (it computes in float32, or
the value is a bf16 number, as every weight of a bf16 source is), that copy is the value and nothing more is held:
the whole tensor at ZeRO 0-2, where every rank holds it, or this rank's partition at ZeRO-3 (``keep`` decides, by
comparing). Otherwise each rank keeps a 1/world slice of the fp32 value (flattened, zero-padded to a multiple of
the world size), so a node of 8 ranks holds one copy, not 8. The phase hand-over keeps the trainable parameters'
values the same way between one engine and the next (``xpt_ds.training.fill.hand_over``).

``full`` puts a whole value back, collectively for partitions and slices: every rank calls it for the same names
in the same order.
"""
from __future__ import annotations

import sys
from pathlib import Path

import deepspeed
import torch

LOCAL, PARTITION, SLICE = "local", "partition", "slice"


def _rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _gather(part: torch.Tensor, numel: int, group=None) -> torch.Tensor:
    """The flat whole of equal ``part``s of every rank of ``group`` (NCCL gathers device tensors only)."""
    device = deepspeed.get_accelerator().current_device_name()
    local = part.to(device)
    parts = [torch.empty_like(local) for _ in range(torch.distributed.get_world_size(group))]
    torch.distributed.all_gather(parts, local, group=group)
    return torch.cat(parts).cpu()[:numel]


def holds_exactly(dtype: torch.dtype, value: torch.Tensor) -> bool:
    """Whether ``dtype`` holds every element of the fp32 ``value`` exactly. For bf16 (fp32's upper 16 bits) that is
    every element's lower 16 bits being zero, read in place: a third of the time of a round trip through bf16 and a
    comparison (0.17 against 0.47 s for 10^8 values on 2 cores, 12 of the 63 s an 8B source's fill took here)."""
    if dtype == torch.bfloat16 and sys.byteorder == "little" and value.dtype == torch.float32:
        low = value.detach().contiguous().view(torch.int16).view(-1, 2)[:, 0]  # little-endian: the lower half first
        return not bool(low.any())
    return torch.equal(value.to(dtype).float(), value)


class ShardedValues:
    """Name -> exact fp32 value, each held as LOCAL (a whole tensor this rank has, possibly the engine's own in
    another dtype that holds it exactly), PARTITION (this rank's ZeRO-3 partition of the engine's own copy) or
    SLICE (this rank's 1/world slice, a copy)."""

    def __init__(self):
        self.rank, self.world = _rank_world()
        self.entries: dict[str, tuple[str, torch.Tensor, tuple[int, ...], object]] = {}

    def keep_slice(self, name: str, value: torch.Tensor) -> None:
        """This rank's slice of the whole fp32 ``value`` (a copy: ``value`` can be freed)."""
        value = value.detach()
        if self.world == 1:
            part = value.to("cpu", torch.float32, copy=True)
        else:
            flat = value.reshape(-1)
            size = -(-flat.numel() // self.world)
            piece = flat[self.rank * size:(self.rank + 1) * size]
            part = torch.zeros(size, dtype=torch.float32)
            part[:piece.numel()] = piece
        self.entries[name] = (SLICE, part, tuple(value.shape), None)

    def keep(self, name: str, value: torch.Tensor, param: torch.nn.Parameter) -> None:
        """``value`` (exact fp32, whole) of engine parameter ``param``, which holds it already: the engine's copy
        if it is exact, else a slice."""
        if param.dtype == torch.float32 or holds_exactly(param.dtype, value):
            if hasattr(param, "ds_tensor"):  # ZeRO-3: this rank's partition of it
                self.entries[name] = (PARTITION, param.ds_tensor, tuple(value.shape), param.ds_process_group)
            else:
                self.entries[name] = (LOCAL, param.data, tuple(value.shape), None)
        else:
            self.keep_slice(name, value)

    def take(self, other: "ShardedValues", name: str) -> None:
        self.entries[name] = other.entries[name]

    def local(self, name: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """The whole tensor this rank holds of ``name`` (a LOCAL entry: the previous engine's own storage), if it is
        of ``dtype`` on ``device``: a new engine's module can take it over instead of allocating its own."""
        kind, t, _, _ = self.entries.get(name, (None, None, None, None))
        return t if kind == LOCAL and t.dtype == dtype and t.device == torch.device(device) else None

    def pop_full(self, name: str) -> torch.Tensor:
        """``full(name)``, and the entry is dropped: what it held is freed once the caller is done with the value."""
        value = self.full(name)
        del self.entries[name]
        return value

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def names(self) -> list[str]:
        return list(self.entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name][2]

    def numel(self) -> int:
        """fp32 values this rank holds in copies of its own (not in the engine's storage)."""
        return sum(t.numel() for kind, t, _, _ in self.entries.values() if kind == SLICE)

    def held_by_engine(self) -> int:
        """Parameters whose exact value is the engine's own copy."""
        return sum(kind != SLICE for kind, _, _, _ in self.entries.values())

    def full(self, name: str) -> torch.Tensor:
        """The whole fp32 value of ``name``, on the CPU, on every rank (collective for PARTITION and SLICE). A
        LOCAL float32 value is the engine's own tensor, not a copy: read it, do not change it."""
        kind, t, shape, group = self.entries[name]
        numel = torch.Size(shape).numel()
        if kind == LOCAL:
            return t.detach().to("cpu", torch.float32).reshape(shape)
        if kind == PARTITION:
            return _gather(t.detach().reshape(-1), numel, group).float().reshape(shape)
        if self.world == 1:
            return t.reshape(shape)
        return _gather(t, numel).reshape(shape)


class FrozenWeights(ShardedValues):
    """The values of the parameters a phase freezes. ``file``: a complete file that holds exactly these values
    (the checkpoint they were loaded from or last written to), which the next checkpoint of the phase links
    instead of writing them again (``checkpoint.save``); the values do not change within a phase."""

    def __init__(self, file: Path | None = None):
        super().__init__()
        self.file = file

    def summary(self) -> str:
        """How the values are held, for the log."""
        return (f"{len(self.entries):,} frozen parameters ({self.held_by_engine():,} exact in the engine's own copy, "
                f"{self.numel():,} fp32 values kept beside it on rank {self.rank})")
