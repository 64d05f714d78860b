"""Which parameters AdamW decays (``optim.weight_decay``): weights of two or more dimensions that are not a
LayerNorm's; biases, norms and other vectors do not decay.

A parameter is judged by its full shape (``xpt_ds.model.skeleton.full_shape``). Under ZeRO-3 a parameter built in
``deepspeed.zero.Init`` holds a 1-D partition (or nothing) and keeps its shape in ``ds_shape``: judged by ``p.ndim``
every ZeRO-3 weight was a vector, so runs at ZeRO-3 trained with no weight decay at all (xpt-ds before 2026-12-02);
their checkpoints hold one optimizer group where ZeRO-1/2 hold two (``xpt_ds.checkpoint.migrate.regrouped``).
"""
from __future__ import annotations

from collections.abc import Sequence


def decays(name: str, shape: Sequence[int]) -> bool:
    return len(shape) >= 2 and "LayerNorm" not in name and "layer_norm" not in name
