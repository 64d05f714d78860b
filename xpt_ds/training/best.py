"""The run's best checkpoint (``checkpoint.keep_best``) and early stopping (``guard.early_stop_patience``).

``BestTracker`` sees every validation loss (the ``valid/loss`` the trainer logs, from all-reduced sums, so the same
on every rank; ``agreed`` checks that with one all-reduce) and keeps, in the trainer's resumable state:

- the run's best: ``{tag, step, valid_loss, phase}`` of the lowest validation loss so far. Each improvement asks
  for a checkpoint at that step (``wants_save``), ``keep_last`` never prunes it (``protected``), and the previous
  best goes back to normal pruning. Rank 0 mirrors it in ``RUN_DIR/best.json`` (temp file + rename), which
  ``checkpoint.resolve_tag`` reads for the tag name ``best``;
- early stopping: the current phase's lowest validation loss and how many passes in a row have not improved it by
  more than ``guard.early_stop_min_delta``; ``guard.early_stop_patience`` such passes end the phase (its index goes
  to ``stopped``, so a resume from its end checkpoint, or later, does not run it again). The counting is per phase:
  a new phase starts with no best of its own, whatever the run's best is.

The state is branch-local: a resume from an older tag continues with the best that tag recorded (never a
checkpoint of the abandoned branch, which ``branches.abandon_later`` moved aside), and ``best.json`` is rewritten
from it at the start. A recorded best whose checkpoint no longer exists (pruned by the abandoned branch after it
stopped being the best) is forgotten with a warning; the next validation pass sets a new one.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import deepspeed
import torch

from xpt_ds.checkpoint.tags import BEST_FILE, tag_for
from xpt_ds.io.paths import write_text_atomic

log = logging.getLogger(__name__)


@dataclass
class BestTracker:
    keep: bool = False  # checkpoint.keep_best
    patience: int = 0  # guard.early_stop_patience; 0 = off
    min_delta: float = 0.0  # guard.early_stop_min_delta
    rewind: bool = False  # guard.early_stop_rewind
    best: dict | None = None  # {tag, step, valid_loss, phase}
    phase_index: int = -1  # the phase that phase_loss and stale count for
    phase_loss: float = math.inf  # that phase's reference: its last valid loss that improved by more than min_delta
    stale: int = 0  # validation passes in a row that did not improve phase_loss by more than min_delta
    stopped: list[int] = field(default_factory=list)  # phases ended early
    save_step: int | None = field(default=None, repr=False)  # a new best's step, until its checkpoint is written

    def state_dict(self) -> dict:
        return {"best": self.best, "phase_index": self.phase_index, "phase_loss": self.phase_loss,
                "stale": self.stale, "stopped": list(self.stopped)}

    def load_state_dict(self, sd: dict) -> None:
        self.best, self.phase_index, self.phase_loss = sd["best"], sd["phase_index"], sd["phase_loss"]
        self.stale, self.stopped = sd["stale"], list(sd["stopped"])

    @property
    def protected(self) -> str | None:
        """The tag ``keep_last`` must not prune."""
        return self.best["tag"] if self.keep and self.best else None

    def update(self, loss: float, step: int, tag: str, phase_index: int, phase: str,
               last: bool = False) -> tuple[bool, bool]:
        """One validation pass: (a new run best, whose checkpoint ``tag`` the caller must make sure exists;
        the phase just hit its patience and ends here early). At the phase's ``last`` planned step it ends anyway:
        no early stop, so ``stopped`` (which ``early_stop_rewind`` reads) lists only phases cut short."""
        if phase_index != self.phase_index:  # the first pass of a phase: patience counts afresh
            self.phase_index, self.phase_loss, self.stale = phase_index, math.inf, 0
        if loss < self.phase_loss - self.min_delta:  # the reference moves only with an improvement that counts: a
            self.stale, self.phase_loss = 0, loss  # slow descent (each pass below the last by less than min_delta)
        else:  # still counts once it is min_delta below it (until 2026-12-05 each small step moved it)
            self.stale += 1
        improved = self.keep and math.isfinite(loss) and (self.best is None or loss < self.best["valid_loss"])
        if improved:
            self.best = {"tag": tag, "step": step, "valid_loss": loss, "phase": phase}
            self.save_step = step
        stop = self.patience > 0 and self.stale >= self.patience and not last
        if stop and phase_index not in self.stopped:
            self.stopped.append(phase_index)
        return improved, stop

    def on_validation(self, metrics: dict[str, float], state, phases: list, device: torch.device, rank: int) -> bool:
        """The trainer's hook after each validation pass (``state``: its TrainerState): update and log; True when
        the phase ends here early."""
        if (not self.keep and not self.patience) or "valid/loss" not in metrics:
            return False
        step, phase_index, phase_step = state.global_step, state.phase_index, state.phase_step
        phase, tag = phases[phase_index], tag_for(step)
        improved, stop = self.update(agreed(metrics["valid/loss"], device), step, tag, phase_index, phase.name,
                                     last=phase_step >= phase.steps)
        if rank == 0 and improved:
            log.info("step %d: new best valid loss %.4f (checkpoint %s)", step, self.best["valid_loss"], tag)
        if rank == 0 and stop:
            then = (f"phase '{phases[phase_index + 1].name}' starts next" if phase_index + 1 < len(phases)
                    else "the run ends")
            log.info("early stop: phase '%s' ends at its step %d of %d (global step %d): %d validation passes in a "
                     "row did not improve its best valid loss %.4f by more than %g (guard.early_stop_patience); %s",
                     phase.name, phase_step, phase.steps, step, self.stale, self.phase_loss, self.min_delta, then)
        return stop

    def wants_save(self, state) -> bool:
        """A new best at ``state.global_step`` whose checkpoint the schedule would not write."""
        return self.save_step == state.global_step

    def phase_stopped(self, phase_index: int) -> bool:
        return phase_index in self.stopped

    def rewind_tag(self, state, phase: str, rank: int) -> str | None:
        """guard.early_stop_rewind: the checkpoint the next phase starts from instead of where the current phase
        (``state``: the trainer's phase_index, global_step and time_stopped; named ``phase``) ended: the run's
        best, when early stopping or the time budget (guard.max_train_minutes) ended the phase and the best is one
        of its earlier steps; else None (the next phase starts where this one ended). Either way the phase's last
        step was validated (the trainer validates where a phase ends), so a best before it means the phase ended
        past its best."""
        phase_index, step = state.phase_index, state.global_step
        why = ("early stopping" if self.phase_stopped(phase_index) else
               "the time budget" if phase_index in state.time_stopped else None)
        if not self.rewind or why is None or self.best is None:
            return None
        if self.best["phase"] != phase or self.best["step"] >= step:
            return None
        if rank == 0:
            log.info("the next phase starts from the best checkpoint %s (step %d, valid loss %.4f), not from step %d "
                     "where %s ended phase '%s' (guard.early_stop_rewind)", self.best["tag"],
                     self.best["step"], self.best["valid_loss"], step, why, phase)
        return self.best["tag"]

    def restore(self, run_dir: Path, complete: list[str], rank: int) -> None:
        """After loading a checkpoint's state (or at a fresh start): forget a best whose checkpoint is gone, and
        make ``best.json`` say what this branch records (rank 0)."""
        if self.best is not None and self.best["tag"] not in complete:
            if rank == 0:
                log.warning("the recorded best checkpoint %s (valid loss %.4f) no longer exists; the next "
                            "validation pass sets a new best", self.best["tag"], self.best["valid_loss"])
            self.best = None
        if rank == 0:
            self.write(run_dir)

    def write(self, run_dir: Path) -> None:
        """``RUN_DIR/best.json``, atomically (rank 0); removed when there is no best (keep_best off, or a branch
        that has none yet)."""
        path = run_dir / BEST_FILE
        if not self.keep or self.best is None:
            path.unlink(missing_ok=True)
            return
        write_text_atomic(path, json.dumps(self.best, indent=1) + "\n", fsync=True)


def agreed(loss: float, device: torch.device) -> float:
    """The validation loss every rank decides on: the ranks' maximum (one all-reduce of [loss, -loss]). It comes
    from all-reduced sums, so the ranks agree already; a difference is logged, never acted on differently."""
    t = torch.tensor([loss, -loss], dtype=torch.float64, device=device)
    deepspeed.comm.all_reduce(t, op=deepspeed.comm.ReduceOp.MAX)
    high, low = t[0].item(), -t[1].item()
    if high != low and deepspeed.comm.get_rank() == 0:
        log.warning("valid/loss differs between ranks (%.17g to %.17g); best and early stopping use %.17g",
                    low, high, high)
    return high

