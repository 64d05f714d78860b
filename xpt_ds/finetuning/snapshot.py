"""The best validation epoch's weights, kept on the host while later epochs train (``--valid``).

Only what training changes is kept: the trainable parameters and the buffers, not the frozen weights. A LoRA run's
snapshot is its updates and its head (MBs at 8B, where the whole model is 32 GB in fp32). A later best is copied
into the tensors the earlier one left, so a full fine-tuning keeps one host copy of its weights, never two.
"""
from __future__ import annotations

import torch
from torch import nn


class BestWeights:
    """``keep()`` copies the trained part of ``model`` to the host; ``restore()`` writes it back in place."""

    def __init__(self, model: nn.Module):
        self.model = model
        frozen = {id(p) for p in model.parameters() if not p.requires_grad}
        seen, self.names = set(), []
        for name, value in model.state_dict(keep_vars=True).items():
            if id(value) not in frozen and id(value) not in seen:  # a tied weight once, under its first name
                seen.add(id(value))
                self.names.append(name)
        self._kept: dict[str, torch.Tensor] | None = None

    @property
    def held(self) -> bool:
        return self._kept is not None

    def _live(self) -> dict[str, torch.Tensor]:
        state = self.model.state_dict(keep_vars=True)  # read again: a buffer may have been replaced
        return {name: state[name].detach() for name in self.names}

    @torch.no_grad()
    def keep(self) -> None:
        live = self._live()
        if self._kept is None:
            self._kept = {name: value.to("cpu", copy=True) for name, value in live.items()}
            return
        for name, value in live.items():
            self._kept[name].copy_(value)

    @torch.no_grad()
    def restore(self) -> None:
        if self._kept is None:
            raise RuntimeError("BestWeights.restore before any keep")
        for name, value in self._live().items():
            value.copy_(self._kept[name])

    def numel(self) -> int:
        """Elements held on the host."""
        return sum(t.numel() for t in self._kept.values()) if self._kept else 0
