"""Checkpoints: DeepSpeed engine state + per-rank state + fp32 frozen weights + a completion marker.

Layout of ``RUN_DIR/checkpoints/TAG/``:
- DeepSpeed's own files (``mp_rank_*``, ``*_optim_states.pt``), client state = trainer/data state + config;
- ``rank_state_{rank:05d}.pt`` per rank (RNG states: DeepSpeed saves client state from one rank only);
- ``frozen_fp32.pt``: exact fp32 values of the parameters frozen in the current phase (the engine holds
  them only in the compute dtype);
- ``hf_config/``: the target model's HF config (export builds the skeleton from it) and ``spm.model``;
- ``COMPLETE``: written by rank 0 after a barrier, last. A tag without it does not count. DeepSpeed's
  ``latest`` file is not written (``save_latest=False``) and never trusted.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import deepspeed
import numpy as np
import torch

MARKER = "COMPLETE"


def tag_for(global_step: int) -> str:
    return f"global_step{global_step:09d}"


def _atomic_torch_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save(engine, ckpt_root: Path, tag: str, client_state: dict, frozen: dict, hf_config, tokenizer: str) -> None:
    rank = deepspeed.comm.get_rank()
    tag_dir = ckpt_root / tag
    if rank == 0:  # re-saving a tag (a run resumed from an older one): it is incomplete until rewritten
        (tag_dir / MARKER).unlink(missing_ok=True)
    deepspeed.comm.barrier()
    engine.save_checkpoint(str(ckpt_root), tag=tag, client_state=client_state, save_latest=False)
    _atomic_torch_save({"rng": rng_state()}, tag_dir / f"rank_state_{rank:05d}.pt")
    if rank == 0:
        _atomic_torch_save(frozen, tag_dir / "frozen_fp32.pt")
        hf_config.save_pretrained(tag_dir / "hf_config")
        shutil.copyfile(tokenizer, tag_dir / "spm.model")
    deepspeed.comm.barrier()  # every rank's files are on disk before the marker
    if rank == 0:
        marker = tag_dir / MARKER
        tmp = tag_dir / (MARKER + ".tmp")
        tmp.write_text(json.dumps({"global_step": client_state["trainer"]["global_step"],
                                   "world_size": deepspeed.comm.get_world_size()}))
        os.replace(tmp, marker)
    deepspeed.comm.barrier()


def prune(ckpt_root: Path, keep_last: int) -> list[str]:
    """Delete all but the newest ``keep_last`` complete checkpoints (rank 0). The marker goes first, so an
    interrupted delete leaves an incomplete directory, never a 'complete' one with files missing."""
    tags = complete_tags(ckpt_root)
    doomed = tags[:-keep_last] if keep_last > 0 else []
    for tag in doomed:
        (ckpt_root / tag / MARKER).unlink()
        shutil.rmtree(ckpt_root / tag)
    return doomed


def complete_tags(ckpt_root: Path) -> list[str]:
    """Complete checkpoint tags, oldest first."""
    if not ckpt_root.is_dir():
        return []
    tags = [d for d in ckpt_root.iterdir() if (d / MARKER).is_file()]
    return [d.name for d in sorted(tags, key=lambda d: json.loads((d / MARKER).read_text())["global_step"])]


def resolve_tag(ckpt_root: Path, resume: str) -> str | None:
    """'none' -> None; 'auto' -> newest complete tag or None; else the tag, which must be complete."""
    if resume == "none":
        return None
    tags = complete_tags(ckpt_root)
    if resume == "auto":
        return tags[-1] if tags else None
    if resume not in tags:
        raise FileNotFoundError(f"checkpoint '{resume}' is not a complete checkpoint in {ckpt_root} "
                                f"(complete: {', '.join(tags) or 'none'})")
    return resume


def read_client_state(ckpt_root: Path, tag: str) -> dict:
    """Client state without building an engine (it is in the rank-0 model-states file)."""
    files = sorted((ckpt_root / tag).glob("*mp_rank_00_model_states.pt"))
    return torch.load(files[0], map_location="cpu", weights_only=False, mmap=True)


def load(engine, ckpt_root: Path, tag: str) -> dict:
    """Restore engine + this rank's RNG; returns the frozen fp32 weights saved with the checkpoint."""
    engine.load_checkpoint(str(ckpt_root), tag=tag, load_module_strict=True)
    tag_dir = ckpt_root / tag
    rank_file = tag_dir / f"rank_state_{deepspeed.comm.get_rank():05d}.pt"
    if rank_file.is_file():
        set_rng_state(torch.load(rank_file, weights_only=False)["rng"])
    return torch.load(tag_dir / "frozen_fp32.pt", map_location="cpu", weights_only=True)
