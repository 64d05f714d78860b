"""The current phase's module and DeepSpeed engine. DeepSpeed fixes the trainable set at ``initialize``, so each
phase gets a new module and engine, filled with the exact fp32 values it starts from: a fresh start's build plan, a
checkpoint, where the previous phase ended (the old engine's values kept as each rank's share, ``fill.hand_over``),
its best checkpoint (``guard.early_stop_rewind``), or the kept ends of the phases it names (``start_from``,
``merge``). The exact fp32 values of the frozen parameters sit beside the engine (``FrozenWeights``)."""
from __future__ import annotations

import logging
import math
import time

import torch

from xpt_ds.checkpoint import phase_ends
from xpt_ds.checkpoint.frozen import FrozenWeights
from xpt_ds.checkpoint.values import CheckpointValues
from xpt_ds.config import TrainConfig
from xpt_ds.model.phases import build_phase_starts, build_phase_trainables, phases_read_later, value_from_ends
from xpt_ds.model.skeleton import full_shape
from xpt_ds.runtime.host_memory import release_freed
from xpt_ds.training import engine as engines
from xpt_ds.training.fill import engine_values, fill, fill_fresh, hand_over

log = logging.getLogger(__name__)


class PhaseEngine:
    def __init__(self, cfg: TrainConfig, hf_config, tags: dict, rank: int):
        self.cfg, self.hf_config, self.rank = cfg, hf_config, rank
        # Module-relative names: the engine wraps the objective, whose HF model is ``hf``.
        self.names = {f"hf.{n}" for n in tags}  # every parameter
        self.trainables = [{f"hf.{n}" for n in s} for s in build_phase_trainables(cfg, tags)]
        self.starts = [None if s is None else {f"hf.{n}": p for n, p in s.items()}
                       for s in build_phase_starts(cfg, tags)]
        self.kept_ends = phases_read_later(cfg)
        self.engine = self.optimizer = self.frozen = None

    def build(self, index: int, kept=None, universal: bool = False) -> None:
        """An empty engine for phase ``index`` (``kept``: storage the previous phase's values already hold)."""
        with torch.random.fork_rng(devices=[]):  # whatever a constructor draws does not shift the dropout stream
            self.engine, self.optimizer = engines.build_engine(
                engines.engine_module(self.hf_config, self.cfg, kept), self.trainables[index], self.cfg,
                load_universal=universal)
        self.frozen = FrozenWeights()

    def fill_fresh(self, plan, index: int) -> None:
        fill_fresh(self.engine, plan, self.trainables[index], self.frozen)

    def fill_from(self, values, index: int, what: str, names: set[str] | None = None) -> None:
        fill(self.engine, values, self.trainables[index], self.frozen, what, names=names)

    def frozen_names(self, index: int) -> set[str]:
        return {n for n, _ in self.engine.module.named_parameters() if n not in self.trainables[index]}

    def sizes(self) -> dict[str, int]:
        return {n: math.prod(full_shape(p)) for n, p in self.engine.module.named_parameters()}

    def destroy(self) -> None:
        engines.destroy_engine(self.engine)
        self.engine = self.optimizer = self.frozen = None
        release_freed()  # before the next engine is built

    def hand_over(self, index: int, values, kept, what: str, started: float) -> str:
        """Replace this phase's engine with phase ``index``'s, filled from ``values`` (``start_values``, which began
        at ``started``); returns how long each part took, for the log. No rank holds more than its share of the
        model plus one tensor between the two engines."""
        marks = [("kept", time.perf_counter())]
        scale = engines.loss_scale(self.engine)
        self.destroy()
        marks.append(("old engine freed", time.perf_counter()))
        self.build(index, kept)
        if scale is not None and engines.loss_scale(self.engine) is not None:
            self.engine.optimizer.loss_scale = scale  # fp16: the scale found so far, not the initial one again
        marks.append(("new engine built", time.perf_counter()))
        self.fill_from(values, index, what)
        marks.append(("filled", time.perf_counter()))
        return ", ".join(f"{what} {t - before:.1f} s" for (what, t), before in
                         zip(marks, [started] + [t for _, t in marks[:-1]]))

    def start_values(self, index: int, rewind_tag: str | None, ckpt_root, state, streams):
        """(the exact fp32 values phase ``index`` starts from, by module parameter name, one at a time (collective
        under ZeRO: every rank asks for the same names in the same order); what of them the new module can take
        over, or None): where the previous phase ended (this engine's, kept as each rank's share, each value dropped
        once it is in the new engine: ``fill.hand_over``), its best checkpoint ``rewind_tag``, or the kept ends of
        the phases it names. ``start_from`` also rewinds the data stream to where that phase ended, so that branches
        from one phase see the same batches (as 004 Alg. 1's two models sample the same set P); a merge continues
        the stream where the previous phase left it."""
        phase, sources = self.cfg.phases[index], self.starts[index]
        if sources is None:
            if rewind_tag is None:
                kept = hand_over(self.engine, self.frozen)  # the new module takes over what it can of it
                return kept.pop_full, kept
            return CheckpointValues(ckpt_root, rewind_tag, self.cfg.checkpoint.allow_pickle), None
        ends = {}
        for name in phase.reads():
            ends[name], data = phase_ends.load_phase_end(ckpt_root, name, state.phase_ends.get(name))
            if name == phase.start_from:
                streams.load_state_dict(data)
        return (lambda name: value_from_ends(sources, ends, name)), None

    def keep_end(self, phase_name: str, ckpt_root, state, streams) -> None:
        """A phase that a later one starts from leaves its end on disk before its last checkpoint completes."""
        if phase_name in self.kept_ends:
            specs = [(n, full_shape(p)) for n, p in self.engine.module.named_parameters()]
            state.phase_ends[phase_name] = phase_ends.save_phase_end(
                ckpt_root, phase_name, specs, engine_values(self.engine, self.frozen), streams.state_dict())
