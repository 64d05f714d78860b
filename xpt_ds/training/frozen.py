"""The exact fp32 values of the parameters a phase freezes, sharded over the ranks.

The engine holds frozen parameters only in its compute dtype (bf16 rounds them) and gives them no fp32 master, so
their exact fp32 values are kept beside it: for the phase hand-over, for checkpoints (``frozen_fp32.pt``) and for
a resume. Each rank keeps a 1/world slice of each (flattened, zero-padded to a multiple of the world size), not
the whole: a node of 8 ranks holds one copy of the frozen source instead of 8 (4 bytes per frozen parameter per
node, not per rank). ``full`` puts a whole value back, collectively: every rank calls it for the same names
in the same order.
"""
from __future__ import annotations

from pathlib import Path

import deepspeed
import torch


def _rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class FrozenWeights:
    """Name -> exact fp32 value of each parameter the phase freezes, each rank holding its slice. ``file``: a
    complete file that holds exactly these values (the checkpoint they were loaded from or last written to), which
    the next checkpoint of the phase links instead of writing them again (``checkpoint.save``); the values do not
    change within a phase. ``copy``: the slices never share memory with ``values`` (values read from a file: a
    one-rank world would otherwise keep the whole file mapped); with one rank and no ``copy`` the values are kept
    as they are, no copy."""

    def __init__(self, values: dict[str, torch.Tensor], file: Path | None = None, copy: bool = False):
        self.rank, self.world = _rank_world()
        self.shapes = {name: tuple(t.shape) for name, t in values.items()}
        self.slices = {name: self._slice(t, copy) for name, t in values.items()}
        self.file = file

    def _slice(self, value: torch.Tensor, copy: bool) -> torch.Tensor:
        value = value.detach()
        if self.world == 1:
            return value.clone() if copy else value
        flat = value.reshape(-1)
        size = -(-flat.numel() // self.world)
        part = flat[self.rank * size:(self.rank + 1) * size]
        out = torch.zeros(size, dtype=flat.dtype)
        out[:part.numel()] = part  # a copy: the whole value can be freed
        return out

    def __contains__(self, name: str) -> bool:
        return name in self.shapes

    def names(self) -> list[str]:
        return list(self.shapes)

    def numel(self) -> int:
        """Elements this rank holds."""
        return sum(s.numel() for s in self.slices.values())

    def full(self, name: str) -> torch.Tensor:
        """The whole fp32 value of ``name``, on the CPU, on every rank (an all-gather of the slices)."""
        part = self.slices[name]
        if self.world == 1:
            return part
        device = deepspeed.get_accelerator().current_device_name()  # NCCL gathers CUDA tensors only
        local = part.to(device)
        parts = [torch.empty_like(local) for _ in range(self.world)]
        torch.distributed.all_gather(parts, local)
        shape = self.shapes[name]
        return torch.cat(parts).cpu()[:torch.Size(shape).numel()].reshape(shape)
