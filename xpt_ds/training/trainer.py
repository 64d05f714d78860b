"""The phase-aware post-training loop: MLM for encoder sources, next-token loss for decoder sources. The trainer is
assembled from components by ``xpt_ds.training.build.build_trainer``, which makes every check; this module is the
loop and what it does at each step."""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import deepspeed
import torch

from xpt_ds.checkpoint.checkpointer import Checkpointer
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.config import TrainConfig
from xpt_ds.config.phase_checks import phase_objectives
from xpt_ds.config.schedule import lr_at
from xpt_ds.metrics.logger import LogWindow
from xpt_ds.metrics.profiler import StepProfiler, part
from xpt_ds.runtime.preemption import Preempted, PreemptionWatcher
from xpt_ds.runtime.status import planned_steps
from xpt_ds.training.best import BestTracker
from xpt_ds.training.engine import loss_scale, set_lr, unkept_grad_norm
from xpt_ds.training.guards import Halted, StepGuards, scale_overflow, weights_finite
from xpt_ds.training.phase_engine import PhaseEngine
from xpt_ds.training.reporting import Reporter
from xpt_ds.training.state import TrainerState
from xpt_ds.training.streams import Streams, to_device
from xpt_ds.training.time_budget import TimeBudget
from xpt_ds.training.validation import Validator

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, cfg: TrainConfig, hf_config, rank: int, world: int, device: torch.device, streams: Streams,
                 validator: Validator, engines: PhaseEngine, checkpointer: Checkpointer, state: TrainerState,
                 window: LogWindow, guards: StepGuards, best: BestTracker, budget: TimeBudget, report: Reporter,
                 preemption: PreemptionWatcher, work: tuple[int, float], causal: bool, profiler: StepProfiler):
        self.cfg, self.hf_config, self.rank, self.world, self.device = cfg, hf_config, rank, world, device
        self.causal = causal  # next-token loss on the same packed rows (docs/decoders.md)
        self.streams, self.validator, self.engines, self.checkpointer = streams, validator, engines, checkpointer
        self.state, self.window, self.guards, self.best, self.budget = state, window, guards, best, budget
        self.report, self.logger = report, report.logger
        self.tokens_per_step, self.flops_per_step = work  # every rank's rows of one step (TreLM: counted per step)
        self.step_work = work  # (tokens, FLOPs) of the last step
        self.data_wait = 0.0  # seconds this rank waited for batches in the current step
        self.preemption, self.interrupted = preemption, False  # Ctrl-C on any rank (after_step)
        self.grad_norm = None  # the last step's, where the engine does not keep it (engine.unkept_grad_norm)
        self.profiler = profiler  # profile.*: torch.profiler over chosen steps (xpt_ds.metrics.profiler)

    @property
    def engine(self):
        return self.engines.engine

    @property
    def last_saved(self) -> str | None:
        return self.checkpointer.last_saved

    @property
    def phase(self):
        return self.cfg.phases[self.state.phase_index]

    @property
    def total_steps(self) -> int:  # the progress bar's and status.json's total
        return planned_steps(self.state, [p.steps for p in self.cfg.phases], self.phase_ended(self.state.phase_index))

    def phase_ended(self, index: int) -> bool:
        """Phase ``index`` ended before its planned steps: early stopping, or its share of the time budget."""
        return self.best.phase_stopped(index) or index in self.state.time_stopped

    def info(self, msg: str) -> None:
        if self.rank == 0:
            log.info(msg)

    def train(self) -> None:
        self.write_status("running")  # this attempt's, with its heartbeat: readers see it alive
        window = self.window
        window.started = time.perf_counter()  # its seconds are the loop's, not the engine build's or the load's
        self.budget.start_loop(self.state)
        while True:
            if self.state.phase_step >= self.phase.steps or self.phase_ended(self.state.phase_index):
                with window.pause(), part("phase_switch"):
                    self.end_phase_found_over()
                    self.logger.set_total(self.total_steps)  # less than planned after an early stop
                    if not self.maybe_switch_phase():
                        break
                continue
            self.profiler.begin(self.state.global_step + 1)
            started = time.perf_counter()
            loss, skipped, overflow = self.train_step()
            step_seconds = time.perf_counter() - started
            window.add(loss, skipped, *self.step_work)
            halt, line = self.guards.count_bad_step(skipped, self.state.global_step, overflow)
            if line is not None:
                self.info(line)
            self.logger.advance()
            phase_done = self.state.phase_step == self.phase.steps or self.maybe_stop_for_time()
            with part("log"):
                self.maybe_log(window, self.state.global_step % self.cfg.logging.log_every == 0 or phase_done)
            with window.pause(), part("validation"):
                phase_done = self.maybe_eval(phase_done)  # or early stopping ends the phase here
            with part("log"):
                self.maybe_log(window, phase_done)  # an early stop's last steps, which no log window showed yet
            with window.pause(), part("checkpoint"):
                if phase_done:
                    self.engines.keep_end(self.phase.name, self.checkpointer.root, self.state, self.streams)
                self.maybe_save(phase_done)
            with part("exchange"):
                self.after_step(halt, step_seconds)
            with window.pause():
                self.profiler.end(self.state.global_step)  # the last step of a profile writes it
        self.logger.close()
        self.write_status("finished")

    def end_phase_found_over(self) -> None:
        """The current phase is over: at its last step or an early stop, which ended it in the loop, or where a
        resume starts, which shortened it to the steps it had taken, or fewer (docs/cluster.md). What its end lacks
        is done here: the log window's steps not logged yet (they belong to this phase, not averaged with the next
        phase's first steps into one point), the phase-end validation pass unless one ran at this step
        (``TrainerState.validated_at``; a rerun would log the step twice), and a kept end that a later
        phase reads but the run's state does not record. The checkpoint is not written again: the tag the run
        resumed from is there, and writing it would delete it first. The next checkpoint records the end; a
        restart before it keeps it again."""
        name, state = self.phase.name, self.state
        self.maybe_log(self.window, True)
        unkept = name in self.engines.kept_ends and name not in state.phase_ends
        if unkept:
            self.info(f"phase '{name}' ends at its step {state.phase_step} (phases[{state.phase_index}].steps="
                      f"{self.phase.steps}), where checkpoint {self.last_saved} is: keeping its end, which a later "
                      "phase reads")
        if state.validated_at is None:  # a checkpoint that did not record it: a periodic pass ran before it
            if unkept and not (state.global_step and self.validator.due(state.global_step, False)):
                self.maybe_eval(True)
        elif state.validated_at != state.global_step:
            self.maybe_eval(True)
        if unkept:
            self.engines.keep_end(name, self.checkpointer.root, state, self.streams)

    def train_step(self) -> tuple[torch.Tensor, bool, float | None]:
        """One optimizer step over grad_accum micro-batches: (mean loss as a device tensor, whether DeepSpeed
        skipped the update because the gradient norm was not finite, and for an fp16 engine's loss-scale overflow
        the scale it overflowed at: ``guards.scale_overflow``)."""
        engine = self.engines.engine
        set_lr(self.engines.optimizer, lr_at(self.phase, self.state.phase_updates))
        scale = loss_scale(engine)
        total = torch.zeros((), device=self.device)
        skipped_before, self.data_wait = engine.skipped_steps, 0.0
        poison = self.state.global_step + 1 in self.guards.inject_nan
        target_rows = self.streams.target_rows()
        for micro in range(self.cfg.optim.grad_accum):
            waited = time.perf_counter()
            with part("data"):
                batch = self.streams.next_batch()
            self.data_wait += time.perf_counter() - waited
            with part("forward"):
                loss = engine(**to_device(batch, self.device))
            if poison:
                loss = loss * float("nan")
            with part("backward"):
                engine.backward(loss)
            with part("optimizer"):
                if micro == self.cfg.optim.grad_accum - 1:  # the boundary: the gradients the step clips
                    self.grad_norm = unkept_grad_norm(engine)
                engine.step()
            total += loss.detach()
        self.state.phase_step += 1
        self.state.global_step += 1
        self.step_work = self.streams.step_work(self.hf_config) or (self.tokens_per_step, self.flops_per_step)
        self.state.tokens_seen += self.step_work[0]
        self.state.target_tokens_seen += (self.streams.target_rows() - target_rows) * self.cfg.data.seq_len
        skipped = engine.skipped_steps != skipped_before
        self.state.phase_updates += not skipped  # a skipped step leaves the schedule where it was
        overflow = scale if skipped and scale_overflow(engine, scale, total) else None
        return total / self.cfg.optim.grad_accum, skipped, overflow

    def maybe_stop_for_time(self) -> bool:
        """Whether the time budget ends the current phase at this step (``TimeBudget.stop_here``)."""
        line = self.budget.stop_here(self.state)
        if line is not None:
            self.info(line)
        return line is not None

    def maybe_switch_phase(self) -> bool:
        """At a phase boundary: the next phase's engine, filled with the exact fp32 values it starts from
        (``PhaseEngine.start_values``); False after the last phase."""
        index = self.state.phase_index + 1
        if index >= len(self.cfg.phases):
            return False
        started = time.perf_counter()
        rewind = self.best.rewind_tag(self.state, self.phase.name, self.rank) if self.engines.starts[index] is None \
            else None
        values, kept = self.engines.start_values(index, rewind, self.checkpointer.root, self.state, self.streams)
        self.state.phase_index, self.state.phase_step, self.state.phase_updates = index, 0, 0
        self.budget.start_phase(self.state)
        self.streams.use_phase(self.cfg, index)
        took = self.engines.hand_over(index, values, kept, f"phase '{self.phase.name}' hand-over", started)
        del values, kept
        origin = (f"from the end of '{self.phase.start_from}'" if self.phase.start_from else
                  f"from a merge of {', '.join(self.phase.reads())}" if self.phase.merges else "")
        self.info(f"phase '{self.phase.name}' starts at global step {self.state.global_step} {origin}".rstrip()
                   + f"; trains on {self.objective_names()}; hand-over {time.perf_counter() - started:.1f} s ({took}); "
                   + self.engines.frozen.summary())
        return True

    def objective_names(self) -> str:
        """What the current phase trains on, for the log: its objectives, or a decoder's next-token loss."""
        return "next_token" if self.causal else ", ".join(phase_objectives(self.cfg, self.state.phase_index))

    def maybe_log(self, window: LogWindow, due: bool) -> None:
        """Log the window's steps (one point a tag) and start a new window, when ``due`` and it holds any."""
        if due and window.steps:
            self.log(window)
            window.reset()

    def log(self, window: LogWindow) -> None:
        """The window's steps that were not skipped are the same on every rank (the skip decision is global)."""
        loss, g = None, self.guards
        if window.good:
            mean_loss = window.mean_loss()
            deepspeed.comm.all_reduce(mean_loss)
            loss = mean_loss.item() / self.world  # the one host sync of the logging interval
            if not math.isfinite(loss):  # only an engine that does not skip them lets a non-finite step through
                self.write_status("halted")
                raise Halted(f"training loss is {loss} at step {self.state.global_step} and the step was not "
                             f"skipped ({g.unskipped}), so the weights are not usable; not saving. "
                             f"Newest complete checkpoint: {self.last_saved or 'none'}")
            median = g.loss_spikes.check(loss)
            if median is not None and self.rank == 0:
                log.warning("loss spike at step %d: %.4f is %.1fx the median %.4f of the last %d logged losses",
                            self.state.global_step, loss, loss / median, median, g.loss_spikes.counted)
        grad_norm = self.engine.get_global_grad_norm()
        grad_norm = self.grad_norm if grad_norm is None else grad_norm
        self.report.log_step(self.state.global_step, self.total_steps, window, {
            "train/loss": loss, "train/lr": self.engines.optimizer.param_groups[0]["lr"],  # the last step's
            "train/grad_norm": None if grad_norm is None or not math.isfinite(grad_norm) else float(grad_norm),
            "train/tokens_per_s": None, "train/mfu": None,  # the window's (Reporter.log_step)
            "train/phase": float(self.state.phase_index), "train/step": float(self.state.global_step),
            "train/epoch": float(self.streams.epoch),
            **{f"data/{name}/epoch": float(e) for name, e in self.streams.mixed_epochs().items()},
            "data/skipped_shards": float(len(self.streams.skipped_shards())),
            "train/skipped_steps": float(g.bad_steps.total), "train/tokens_seen": float(self.state.tokens_seen),
            **({} if (scale := loss_scale(self.engine)) is None else {"train/loss_scale": scale})})
        self.write_status("running")

    def maybe_eval(self, phase_done: bool) -> bool:
        """Validate when due; returns whether the phase is done (``xpt_ds.training.best``: early stopping)."""
        if not self.validator.due(self.state.global_step, phase_done):
            return phase_done
        metrics = self.validator.run(self.engine)
        self.state.validated_at = self.state.global_step
        self.logger.log(self.state.global_step, metrics)
        for line in self.validator.lines(self.state.global_step, metrics):
            self.info(line)
        return self.best.on_validation(metrics, self.state, self.cfg.phases, self.device, self.rank) or phase_done

    def maybe_save(self, phase_done: bool) -> None:
        every = self.cfg.checkpoint.every_steps
        if phase_done or (every and self.state.global_step % every == 0) or self.best.wants_save(self.state):
            self.save()

    def save(self) -> str:
        """A checkpoint of everything registered with the checkpointer (``build_trainer`` registers it)."""
        if not weights_finite(self.engine, self.engines.optimizer, self.device):
            self.write_status("halted")
            raise Halted(f"weights are not finite at step {self.state.global_step}: checkpoint "
                         f"{tag_for(self.state.global_step)} not written (a non-finite update went through; "
                         f"{self.guards.unskipped}). Newest complete checkpoint: {self.last_saved or 'none'}")
        tag = self.checkpointer.save(self.engine, self.engines.frozen, self.state.global_step)
        if self.rank == 0:
            self.best.write(Path(self.cfg.run_dir))  # after its checkpoint is complete
            self.checkpointer.prune(self.best.protected)
        self.info(f"saved checkpoint {tag}")
        self.write_status("running")
        return tag

    @torch.no_grad()
    def close(self) -> None:
        """Stop the data loaders' worker processes (they ignore stop signals), a profile under way, and the logger."""
        self.profiler.close()
        self.streams.close()
        self.report.close()

    def after_step(self, halt: bool, seconds: float) -> None:
        """Once per step, on every rank: one host exchange, the slow-step check, then halt or preemption."""
        g = self.guards
        rows = g.exchange.gather([self.preemption.level, seconds, self.data_wait, self.budget.lap()])
        self.budget.add(self.state, float(rows[:, 3].max()))  # the slowest rank's: the same sum on every rank
        line = g.slow_steps.check(self.state.global_step, rows[:, 1:3])
        if line is not None and self.rank == 0:
            log.warning(line)
        if halt:
            self._save_unless_saved()
            self.write_status("halted")
            raise Halted(f"{g.bad_steps.in_a_row} steps in a row had a non-finite loss or gradient norm (more "
                         f"than guard.max_bad_steps={self.cfg.guard.max_bad_steps}); stopped at step "
                         f"{self.state.global_step} with checkpoint {self.last_saved}")
        if rows[:, 0].max() > 0:  # some rank got SIGUSR1/SIGTERM, or Ctrl-C (2: then every rank says interrupted)
            self.interrupted = bool(rows[:, 0].max() >= 2)
            self._save_unless_saved()
            self.write_status("interrupted" if self.interrupted else "preempted")
            raise Preempted(self.last_saved)

    def _save_unless_saved(self) -> None:
        if not self.checkpointer.saved_at(self.state.global_step):
            self.save()

    def write_status(self, state: str, **extra) -> None:
        self.report.write_status(state, self.state, self.phase.name, self.total_steps, self.guards.bad_steps.total,
                                 self.last_saved, **self.budget.status(self.state), **extra)
