"""Checkpoints written by earlier versions, read in today's layout: every rule of the form "an older checkpoint
lacks X / holds Y instead" is here, with when it changed, and nowhere else. Readers call these functions and then
see one layout only.

- client state (``client_state``): a data state without ``seq_len`` (before 2026-11-27) gets the run's
  ``data.seq_len``; a trainer state without ``target_tokens_seen`` (from when ``tokens_seen`` counted target MLM
  rows only) gets ``tokens_seen``; one without ``phase_updates`` (before 2026-12-01, when the LR schedule counted
  skipped steps too) gets ``phase_step``. Pieces that later versions added (``bad_steps``, ``best``,
  ``log_window``) are simply absent: the registry leaves them as constructed (``xpt_ds.checkpoint.registry``);
- the completion marker without ``world_size`` (``saved_world_size``): DeepSpeed's ``dp_world_size``;
- rank state files of before issue 19 (``numpy_rng_key``): numpy's RNG key as an ndarray, not a tensor;
- the frozen-weights file of before 2026-11-28 (``frozen_file``): ``frozen_fp32.pt``, not ``.safetensors``;
- a kept phase end of before 2026-11-28 (``older_phase_end``): ``NAME.pt`` holding the weights and the data
  position, not ``NAME.safetensors`` beside ``NAME.json``;
- a ZeRO-3 checkpoint of before 2026-12-02 (``regrouped``): one optimizer group holding the weights that decay and
  those that do not (``xpt_ds.model.weight_decay``), which only a universal copy maps onto today's two
  (``xpt_ds.checkpoint.universal``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from xpt_ds.model.weight_decay import decays

FROZEN = "frozen_fp32"  # TAG/frozen_fp32.safetensors: the exact fp32 values of the phase's frozen parameters


def client_state(client: dict) -> dict:
    """``client`` (a checkpoint's client state) as this version writes it; a new dict where anything changed."""
    data, saved_len = client.get("data"), client.get("config", {}).get("data", {}).get("seq_len")
    if isinstance(data, dict) and saved_len and "seq_len" not in data:
        client = {**client, "data": {"seq_len": saved_len, **data}}
    trainer = client.get("trainer")
    if isinstance(trainer, dict):  # a field an older trainer state lacks <- the one it then equalled
        added = {new: trainer[old] for new, old in (("target_tokens_seen", "tokens_seen"),
                                                    ("phase_updates", "phase_step"))
                 if new not in trainer and old in trainer}
        if "validated_at" not in trainer:  # before 2026-12-04: the last validation pass's step was not recorded
            added["validated_at"] = None
        if "phase_ends" not in trainer:  # before 2026-11-23: no phase end was kept
            added["phase_ends"] = {}
        if added:
            client = {**client, "trainer": {**trainer, **added}}
    return client


def saved_world_size(marker: dict, client: dict) -> int | None:
    """The data-parallel world size a checkpoint was written on: its marker's, else DeepSpeed's record."""
    return marker.get("world_size") or client.get("dp_world_size")


def numpy_rng_key(key) -> np.ndarray:
    """numpy's MT19937 key from a rank state file: an int64 tensor, or an older file's ndarray."""
    key = key.numpy() if torch.is_tensor(key) else np.asarray(key)
    return key.astype(np.uint32)


def frozen_file(tag_dir: Path) -> Path:
    """The tag's frozen-weights file: ``frozen_fp32.safetensors``, or the ``.pt`` of an older checkpoint."""
    new = tag_dir / f"{FROZEN}.safetensors"
    return new if new.is_file() or not (tag_dir / f"{FROZEN}.pt").is_file() else tag_dir / f"{FROZEN}.pt"


def older_phase_end_file(base: Path, name: str) -> Path:
    """Where a run of before 2026-11-28 kept phase ``name``'s end, under ``CKPTS/phase_ends``."""
    return base / f"{name}.pt"


def older_phase_end(base: Path, name: str) -> tuple[dict, dict] | None:
    """(weights by parameter name, data position) of phase ``name``'s end from an older run's ``NAME.pt``, read
    whole; None when the run keeps it the current way (``NAME.safetensors``) or has no ``.pt``."""
    old = older_phase_end_file(base, name)
    if (base / f"{name}.safetensors").is_file() or not old.is_file():
        return None
    blob = torch.load(old, map_location="cpu", weights_only=True)
    return blob["weights"], blob["data"]


def regrouped(client: dict) -> bool:
    """Whether a checkpoint's optimizer holds parameters that decay and parameters that do not in one group, which
    this run's optimizer keeps apart (a ZeRO-3 checkpoint of before 2026-12-02, judged from the model-states
    file's ``param_shapes``, one name -> shape dict per group). Its groups' flat states do not map onto this run's;
    the universal layout is per parameter."""
    return any(len({decays(name, shape) for name, shape in group.items()}) > 1
               for group in client.get("param_shapes") or [])
