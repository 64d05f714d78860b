"""Whether tensors hold only finite values, settled by their sums first.

A sum is not finite if any value it adds is not (an inf stays inf or meets the opposite inf as NaN; a NaN stays
NaN), so a finite sum proves every value finite in one reduction, without the boolean mask ``isfinite`` writes:
on this project's 2-core CPU VM, 3.6 ms against 63 ms (``isfinite(t).all()``) and 115 ms (counting with
``~isfinite(t)``) for 16.8M fp32 values on one thread. A sum that is not finite does not prove the opposite (finite
values near the dtype's maximum can overflow it), so those tensors are then checked value by value. Sums are
taken in fp32 (bf16 and fp16 values exactly, where they cannot overflow before fp32 does).

The trainer's check before each save (``xpt_ds.training.guards.weights_finite``: every weight and fp32 master,
1.35B values at the 1B shape's phase 1) and the LoRA export's merged weights
(``xpt_ds.model.methods.lora.merged_value``) use it. ``tests/model/test_finite.py`` checks it against ``isfinite`` on
NaN, both infinities, a pair of opposite infinities, overflowing finite sums, bf16, fp16 and empty tensors.
"""
from __future__ import annotations

from typing import Sequence

import torch


def _sum(t: torch.Tensor) -> torch.Tensor:
    """t's sum as a 0-dim fp32 tensor on t's device (fp64 tensors' in fp64, then fp32: it may overflow, never hide
    a non-finite value)."""
    if t.dtype == torch.float64:
        return t.sum().float()
    return t.sum(dtype=torch.float32)


def all_finite(t: torch.Tensor) -> bool:
    """Every value of ``t`` is finite (True for an empty or integer tensor)."""
    if not t.is_floating_point() or not t.numel():
        return True
    return bool(torch.isfinite(_sum(t))) or bool(torch.isfinite(t).all())


def suspects(tensors: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """A 0/1 int64 flag per tensor on ``device``, in order: 1 where its sum is not finite (it may hold a non-finite
    value); 0 for an empty or integer tensor. One reduction per tensor and no host sync."""
    zero = torch.zeros((), dtype=torch.float32, device=device)
    sums = [_sum(t).to(device) if t.is_floating_point() and t.numel() else zero for t in tensors]
    if not sums:
        return torch.zeros(0, dtype=torch.int64, device=device)
    return (~torch.isfinite(torch.stack(sums))).to(torch.int64)


def count_nonfinite(tensors: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The number of non-finite values in ``tensors``, a 0-dim int64 tensor on ``device`` (value by value)."""
    bad = torch.zeros((), dtype=torch.int64, device=device)
    for t in tensors:
        if t.is_floating_point() and t.numel():
            bad += (~torch.isfinite(t)).sum().to(device)
    return bad
