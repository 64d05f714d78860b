"""The random generators a checkpoint restores, per rank (each rank draws its own dropout): registered with the
checkpoint's registry as ``rng`` in the rank's ``rank_state`` file, as plain data (``torch.load(weights_only=True)``
reads it)."""
from __future__ import annotations

import random

import numpy as np
import torch

from xpt_ds.checkpoint import migrate


def rng_state() -> dict:
    """Every generator's state as plain data: numpy's ('MT19937', uint32 key, pos, has_gauss, cached) with the
    key as an int64 tensor, Python's (version, 625 ints, gauss) as it is."""
    kind, key, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": [kind, torch.from_numpy(key.astype(np.int64)), int(pos), int(has_gauss), float(cached)]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def seed_everything(seed: int) -> None:
    """Seed every generator ``rng_state`` saves (torch's, numpy's and Python's global ones), so that two runs of
    one config save the same bits in their rank_state files too, whether or not anything draws from the latter."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def set_rng_state(state: dict) -> None:
    """Inverse of ``rng_state``."""
    torch.set_rng_state(state["torch"])
    kind, key, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, migrate.numpy_rng_key(key), pos, has_gauss, cached))
    random.setstate(tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class RNGState:
    """This process's generators as a checkpoint piece."""

    def state_dict(self) -> dict:
        return rng_state()

    def load_state_dict(self, state: dict) -> None:
        set_rng_state(state)
