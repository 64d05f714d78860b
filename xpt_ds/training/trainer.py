"""The phase-aware post-training loop: MLM for encoder sources, next-token loss for decoder sources."""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import deepspeed
import torch

from xpt_ds.config import ConfigError, TrainConfig, save_config, to_dict
from xpt_ds.config.phase_checks import phase_objectives
from xpt_ds.data.mlm import build_streams
from xpt_ds.data.tokenizer import tokenizer_for
from xpt_ds.embedding_init.context import log_report
from xpt_ds.errors import UserError
from xpt_ds.io.paths import unwritable
from xpt_ds.metrics.logger import LogWindow, MetricsLogger, flops_per_token, peak_flops
from xpt_ds.metrics.mlm import MLMStats, piece_byte_lengths, piece_char_lengths, piece_word_starts, scored_batch
from xpt_ds.model.build import build_plan, check_data_fits, check_source, planned_tags, planned_target, saved_tags
from xpt_ds.model.decoder import is_decoder
from xpt_ds.model.phases import build_phase_starts, build_phase_trainables, check_patterns, phases_read_later
from xpt_ds.model.phases import value_from_ends
from xpt_ds.training import branches, checkpoint, phase_ends, tag_checks
from xpt_ds.training.activations import recomputed_layers
from xpt_ds.training.best import BestTracker
from xpt_ds.training.checkpoint_values import CheckpointValues
from xpt_ds.training.engine import (
    build_engine,
    check_device_support,
    destroy_engine,
    engine_module,
    load_ds_config,
    lr_at,
    no_skip_reason,
    set_lr,
    zero_stage,
)
from xpt_ds.training.fill import engine_values, fill, fill_fresh, hand_over
from xpt_ds.training.frozen import FrozenWeights
from xpt_ds.training.host_memory import release_freed
from xpt_ds.training.guards import (
    BadStepCounter,
    Halted,
    RankExchange,
    SlowSteps,
    SpikeDetector,
    check_streams_agree,
    shard_layouts,
    skipped_shards,
    weights_finite,
)
from xpt_ds.training.preemption import Preempted, PreemptionWatcher
from xpt_ds.training.state import TrainerState
from xpt_ds.training.status import StatusFile, planned_steps
from xpt_ds.training.time_budget import TimeBudget
from xpt_ds.trelm.data import TreLMBatchStream, build_trelm_stream
from xpt_ds.trelm.valid import build_cdlm_validation
from xpt_ds.trelm.work import micro_batch_work

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.rank, self.world = deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()
        self.run_dir = Path(cfg.run_dir)
        self.ckpt_root = self.run_dir / "checkpoints"
        why = unwritable(self.run_dir, self.rank)  # before minutes of model building, on every rank
        if checkpoint.agree(why):
            raise ConfigError(f"config key 'run_dir': cannot write {self.run_dir}: "
                              f"{why or 'another rank cannot (see its error)'}")
        checkpoint.check_writable(self.ckpt_root, self.rank)  # now, not at the first save
        self.ds_config = load_ds_config(cfg.deepspeed)  # the engine JSON as the user wrote it, checked before the
        check_device_support(self.ds_config, cfg.deepspeed)  # model is built
        check_source(cfg.model, cfg.data)  # what the source cannot take, before its tokenizer is read
        self.tok = tokenizer_for(cfg.model)
        self.char_lengths = piece_char_lengths(self.tok)  # valid/bits_per_char: compares across vocabularies
        self.word_starts = piece_word_starts(self.tok)  # valid/bits_per_word: so does this
        self.byte_lengths = piece_byte_lengths(self.tok)  # valid/bits_per_byte: and this
        family, self.hf_config = planned_target(cfg.model, self.tok)  # from config.json: checks before the weights
        check_data_fits(self.hf_config, cfg.data)
        check_patterns(cfg, planned_tags(cfg.model, family, self.hf_config))
        self.causal = is_decoder(self.hf_config)  # next-token loss on the same packed rows (docs/decoders.md)
        try:  # a problem on one rank stops them all (check_streams_agree), not it alone
            self.open_streams()
            problem = None
        except (UserError, OSError) as e:
            problem = e
        check_streams_agree(problem, [] if problem else skipped_shards(self.train_stream),
                            {} if problem else shard_layouts(self.train_stream, self.valid_stream))
        self.resume_tag = checkpoint.resolve_tag(self.ckpt_root, cfg.checkpoint.resume, "--resume", ("auto", "none"))
        self.resume_client = None if self.resume_tag is None else checkpoint.read_client_state(
            self.ckpt_root, self.resume_tag, cfg.checkpoint.allow_pickle)
        self.plan = None  # a fresh start's build plan (xpt_ds.model.build), until its values are in the engine
        if self.resume_tag is None:
            self.plan = build_plan(cfg.model, self.tok, cfg.data)
            self.tags, self.embedding_init = self.plan.tags, self.plan.embedding_init
        else:  # the parameters' tags and the first start's report, which every checkpoint carries
            self.tags = tag_checks.resumed_tags(self.ckpt_root / self.resume_tag, self.resume_client, cfg.model,
                                                self.tok, self.hf_config)
            self.embedding_init = self.resume_client.get("embedding_init")
        if self.rank == 0:
            log_report(self.embedding_init, cfg.model.embedding_init, self.resume_tag, self.run_dir)
        # Module-relative names: the engine wraps the objective, whose HF model is ``hf``.
        self.trainables = [{f"hf.{n}" for n in s} for s in build_phase_trainables(cfg, self.tags)]
        self.starts = [None if s is None else {f"hf.{n}": p for n, p in s.items()}
                       for s in build_phase_starts(cfg, self.tags)]
        self.kept_ends = phases_read_later(cfg)
        self.state = TrainerState()
        self.device = torch.device(deepspeed.get_accelerator().current_device_name())
        self.tokens_per_step = cfg.optim.micro_batch_size * cfg.optim.grad_accum * self.world * cfg.data.seq_len
        self.flops_per_step = flops_per_token(self.hf_config, cfg.data.seq_len,
                                              1.0 if self.causal else cfg.data.mask_prob) * self.tokens_per_step
        self.step_work = (0, 0.0)  # (tokens, FLOPs) of the last step, every rank's rows (TreLM: xpt_ds.trelm.work)
        self.step_seconds: float | None = None  # mean of the last log window, for the ETA
        self.window = LogWindow(self.device)  # the steps since the last log step (a resume continues it)
        self.peak = peak_flops(cfg.logging.peak_tflops)
        if reason := no_skip_reason(self.ds_config):  # else DeepSpeed skips a non-finite step (guards)
            self._info(f"non-finite steps are not skipped ({reason}): a non-finite loss halts the run at the next "
                       "log step, and no checkpoint is written from non-finite weights")
        self.unskipped = reason or "the engine did not skip it"  # why a non-finite step can reach the weights
        self.engine = self.optimizer = None
        self.frozen = None  # the phase's FrozenWeights (xpt_ds.training.frozen), set with the engine
        self.last_saved: str | None = None  # newest complete checkpoint of this run
        self.last_tokens_per_s: float | None = None
        self.preemption, self.interrupted = PreemptionWatcher(rank=self.rank), False  # Ctrl-C on any rank (after_step)
        self.exchange = RankExchange()  # per-step host all_gather: preemption flags, step times, data waits
        g = cfg.guard
        self.bad_steps = BadStepCounter(g.max_bad_steps)
        self.loss_spikes = SpikeDetector(g.loss_spike_ratio, g.loss_spike_window)
        self.slow_steps = SlowSteps(g.slow_step_ratio, g.slow_step_window, self.world)
        self.inject_nan = set(g.inject_nan_steps) if self.rank == 0 else set()
        self.best = BestTracker(cfg.checkpoint.keep_best, g.early_stop_patience, g.early_stop_min_delta,
                                g.early_stop_rewind)
        self.budget = TimeBudget(g.max_train_minutes, cfg.phases)
        self.data_wait = 0.0  # seconds this rank waited for batches in the current step
        self.logger = MetricsLogger(self.run_dir, self.rank == 0, cfg.logging.tensorboard, cfg.logging.progress_bar)
        self.status = StatusFile(self.run_dir) if self.rank == 0 else None  # status.json, with a heartbeat
        for stream in filter(None, (self.train_stream, self.valid_stream)):  # before any engine thread: data/workers.py
            stream.fork_workers()

    def open_streams(self) -> None:
        cfg = self.cfg
        self.train_stream, self.valid_stream = build_streams(cfg.data, self.tok, cfg.optim.micro_batch_size,
                                                             self.rank, self.world, causal=self.causal)
        if cfg.data.parallel_shards or cfg.data.source_shards:  # TreLM: the phase's other objectives join MLM
            self.train_stream = build_trelm_stream(self.train_stream, cfg, self.tok,
                                                   self.hf_config.xpt_trelm_source_vocab_size, self.rank, self.world)
        self.cdlm_valid = None if not isinstance(self.train_stream, TreLMBatchStream) else build_cdlm_validation(
            cfg, self.train_stream.source_tok, self.tok, self.rank, self.world)  # data.parallel_valid_shards

    def setup(self) -> None:
        tag = self.resume_tag
        if self.cfg.checkpoint.resume != "auto":  # a new branch: what the abandoned one wrote after tag moves aside
            kept = set(self.resume_client["trainer"].get("phase_ends", {})) if tag is not None else set()
            branches.start_branch(self.ckpt_root, tag, kept, self.rank)
        checkpoint.seed_everything(self.cfg.seed + self.rank)  # dropout stream of this rank, unless a checkpoint has it
        universal = False
        if tag is not None:
            allow_pickle = self.cfg.checkpoint.allow_pickle
            client, self.resume_client = self.resume_client, None
            tag_checks.check_files(self.ckpt_root / tag, allow_pickle)  # before DeepSpeed unpickles them
            self.state.load_state_dict(client["trainer"])
            for key in [k for k in ("bad_steps", "best") if k in client]:  # absent from older checkpoints
                getattr(self, key).load_state_dict(client[key])
            if "log_window" in client:  # absent before 2026-11-28
                self.window.load_state_dict(client["log_window"], self.rank, self.world)
            saved_data = client.get("config", {}).get("data", {})
            saved_len = saved_data.get("seq_len")  # for data states written before 2026-11-27
            self.train_stream.load_state_dict({"seq_len": saved_len, **client["data"]} if saved_len else client["data"])
            for line in tag_checks.resume_warnings(self.ckpt_root / tag, client, self.cfg,
                                                   self.valid_stream is not None, self.world) if self.rank == 0 else []:
                log.warning(line)
            universal = checkpoint.prepare_rescale(self.ckpt_root, tag, client, self.world,
                                                   zero_stage(self.ds_config))
        self.use_phase_objectives()
        trainable = self.trainables[self.state.phase_index]
        started = time.perf_counter()
        with torch.random.fork_rng(devices=[]):  # whatever a constructor draws does not shift the dropout stream
            self.engine, self.optimizer = build_engine(engine_module(self.hf_config, self.cfg), trainable, self.cfg,
                                                       load_universal=universal)
        self._info(f"engine built on an empty skeleton in {time.perf_counter() - started:.1f} s")
        self.frozen = FrozenWeights()
        if tag is None:
            fill_fresh(self.engine, self.plan, trainable, self.frozen)
            self.plan = None
        else:
            self.last_saved = tag
            frozen_file = checkpoint.load(self.engine, self.ckpt_root, tag, universal, self.cfg.checkpoint.allow_pickle)
            fill(self.engine, frozen_file.get, trainable, self.frozen, f"frozen weights of {tag}",
                 names={n for n, _ in self.engine.module.named_parameters() if n not in trainable})
            self.frozen.file = frozen_file.path
            self._info(f"resumed from {tag}: phase {self.state.phase_index} step {self.state.phase_step}, "
                       f"global step {self.state.global_step}")
            if self.state.phase_step > self.phase.steps and self.rank == 0:  # the config shrank a phase
                log.warning("checkpoint %s is at step %d of phase '%s', past its phases[%d].steps=%d: that phase "
                            "ends here, with the steps it already took", tag, self.state.phase_step,
                            self.phase.name, self.state.phase_index, self.phase.steps)
        self.best.restore(self.run_dir, checkpoint.complete_tags(self.ckpt_root), self.rank)
        if self.rank == 0:
            save_config(self.cfg, self.run_dir / "config.yaml")
        self.logger.start(self.state.global_step, self.total_steps)
        sizes = {n: math.prod(getattr(p, "ds_shape", p.shape)) for n, p in self.engine.module.named_parameters()}
        self._info(f"model: {sum(sizes.values()):,} parameters; phase '{self.phase.name}' trains "
                   f"{sum(sizes[n] for n in trainable):,} on {self.objective_names()}; {self.frozen.summary()}")
        if self.cfg.activations.checkpoint_every:
            recompute, layers = recomputed_layers(self.engine.module.hf)
            self._info(f"activation checkpointing: {recompute} of {layers} layers recompute in the backward")

    @property
    def phase(self):
        return self.cfg.phases[self.state.phase_index]

    @property
    def total_steps(self) -> int:  # the progress bar's and status.json's total
        return planned_steps(self.state, [p.steps for p in self.cfg.phases], self.phase_ended(self.state.phase_index))

    def phase_ended(self, index: int) -> bool:
        """Phase ``index`` ended before its planned steps: early stopping, or its share of the time budget."""
        return self.best.phase_stopped(index) or index in self.state.time_stopped

    def _info(self, msg: str) -> None:
        if self.rank == 0:
            log.info(msg)

    def train(self) -> None:
        self.write_status("running")  # this attempt's, with its heartbeat: readers see it alive
        window = self.window
        window.started = time.perf_counter()  # its seconds are the loop's, not the engine build's or the load's
        self.budget.start_loop(self.state)
        while True:
            if self.state.phase_step >= self.phase.steps or self.phase_ended(self.state.phase_index):
                self.logger.set_total(self.total_steps)  # less than planned after an early stop
                if not self.maybe_switch_phase():
                    break
                continue
            started = time.perf_counter()
            loss, skipped = self.train_step()
            step_seconds = time.perf_counter() - started
            window.add(loss, skipped, *self.step_work)
            halt = self.count_bad_step(skipped)
            self.logger.advance()
            phase_done = self.state.phase_step == self.phase.steps or self.maybe_stop_for_time()
            if self.state.global_step % self.cfg.logging.log_every == 0 or phase_done:
                self.log(window)
                window.reset()
            phase_done = self.maybe_eval(phase_done)  # or early stopping ends the phase here
            if phase_done and window.steps:  # an early stop's last steps, which no log window showed yet
                self.log(window)
                window.reset()
            self.maybe_keep_phase_end(phase_done)
            self.maybe_save(phase_done)
            self.after_step(halt, step_seconds)
        self.logger.close()
        self.write_status("finished")

    def train_step(self) -> tuple[torch.Tensor, bool]:
        """One optimizer step over grad_accum micro-batches: (mean loss as a device tensor, whether DeepSpeed
        skipped the update because the gradient norm was not finite)."""
        set_lr(self.optimizer, lr_at(self.phase, self.state.phase_step))
        total = torch.zeros((), device=self.device)
        skipped_before, self.data_wait = self.engine.skipped_steps, 0.0
        poison = self.state.global_step + 1 in self.inject_nan
        rows = []
        for _ in range(self.cfg.optim.grad_accum):
            waited = time.perf_counter()
            batch = next(self.train_stream)
            self.data_wait += time.perf_counter() - waited
            if isinstance(self.train_stream, TreLMBatchStream):
                rows += self.train_stream.last_rows
            loss = self.engine(**self._to_device(batch))
            if poison:
                loss = loss * float("nan")
            self.engine.backward(loss)
            self.engine.step()
            total += loss.detach()
        self.state.phase_step += 1
        self.state.global_step += 1
        self.step_work = micro_batch_work(self.hf_config, rows) if rows else (self.tokens_per_step,
                                                                              self.flops_per_step)
        self.state.tokens_seen += self.step_work[0]
        self.state.target_tokens_seen += self.tokens_per_step
        return total / self.cfg.optim.grad_accum, self.engine.skipped_steps != skipped_before

    def _to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items() if k != "seq_ids"}

    def maybe_stop_for_time(self) -> bool:
        """Whether the time budget ends the current phase at this step (``TimeBudget.stop_here``)."""
        line = self.budget.stop_here(self.state)
        if line is not None:
            self._info(line)
        return line is not None

    def maybe_switch_phase(self) -> bool:
        """At a phase boundary: a new module and engine for the next phase (DeepSpeed fixes the trainable set at
        ``initialize``), filled with the exact fp32 values the phase starts from. The old engine's values are kept
        as this rank's share (``fill.hand_over``) before it is destroyed, then put into the new one a parameter
        at a time: no rank holds more than its share of the model plus one tensor between the two engines."""
        if self.state.phase_index + 1 >= len(self.cfg.phases):
            return False
        started = time.perf_counter()
        values, kept = self.start_values(self.state.phase_index + 1)
        marks = [("kept", time.perf_counter())]
        destroy_engine(self.engine)
        self.engine = self.optimizer = self.frozen = None
        release_freed()  # before the new engine is built
        marks.append(("old engine freed", time.perf_counter()))
        self.state.phase_index += 1
        self.state.phase_step = 0
        self.budget.start_phase(self.state)
        self.use_phase_objectives()
        trainable = self.trainables[self.state.phase_index]
        with torch.random.fork_rng(devices=[]):  # the rebuild must not shift the dropout stream
            self.engine, self.optimizer = build_engine(engine_module(self.hf_config, self.cfg, kept), trainable,
                                                       self.cfg)
        marks.append(("new engine built", time.perf_counter()))
        self.frozen = FrozenWeights()
        fill(self.engine, values, trainable, self.frozen, f"phase '{self.phase.name}' hand-over")
        del values, kept
        marks.append(("filled", time.perf_counter()))
        took = ", ".join(f"{what} {t - before:.1f} s" for (what, t), before in
                         zip(marks, [started] + [t for _, t in marks[:-1]]))
        origin = (f"from the end of '{self.phase.start_from}'" if self.phase.start_from else
                  f"from a merge of {', '.join(self.phase.reads())}" if self.phase.merges else "")
        self._info(f"phase '{self.phase.name}' starts at global step {self.state.global_step} {origin}".rstrip()
                   + f"; trains on {self.objective_names()}; hand-over {time.perf_counter() - started:.1f} s ({took}); "
                   + self.frozen.summary())
        return True

    def objective_names(self) -> str:
        """What the current phase trains on, for the log: its objectives, or a decoder's next-token loss."""
        return "next_token" if self.causal else ", ".join(phase_objectives(self.cfg, self.state.phase_index))

    def use_phase_objectives(self) -> None:
        """TreLM's stream builds the current phase's objectives' rows; a plain MLM stream has target MLM only."""
        if isinstance(self.train_stream, TreLMBatchStream):
            self.train_stream.use(phase_objectives(self.cfg, self.state.phase_index))

    def start_values(self, index: int):
        """(the exact fp32 values phase ``index`` starts from, by module parameter name, one at a time (collective
        under ZeRO: every rank asks for the same names in the same order); what of them the new module can take
        over, or None): where the previous phase ended (this engine's, kept as each rank's share, each value dropped
        once it is in the new engine: ``fill.hand_over``), its best checkpoint (guard.early_stop_rewind),
        or the kept ends of the phases it names. ``start_from`` also rewinds the data stream to where that phase
        ended, so that branches from one phase see the same batches (as 004 Alg. 1's two models sample the same
        set P); a merge continues the stream where the previous phase left it."""
        phase, sources = self.cfg.phases[index], self.starts[index]
        if sources is None:  # where the previous phase ended, or its best (guard.early_stop_rewind)
            tag = self.best.rewind_tag(self.state, self.phase.name, self.rank)
            if tag is None:
                kept = hand_over(self.engine, self.frozen)  # the new module takes over what it can of it
                return kept.pop_full, kept
            return CheckpointValues(self.ckpt_root, tag, self.cfg.checkpoint.allow_pickle), None
        ends = {}
        for name in phase.reads():
            ends[name], data = phase_ends.load_phase_end(self.ckpt_root, name, self.state.phase_ends.get(name))
            if name == phase.start_from:
                self.train_stream.load_state_dict(data)
        return (lambda name: value_from_ends(sources, ends, name)), None

    def maybe_keep_phase_end(self, phase_done: bool) -> None:
        """A phase that a later one starts from leaves its end on disk before its last checkpoint completes."""
        if phase_done and self.phase.name in self.kept_ends:
            specs = [(n, tuple(getattr(p, "ds_shape", p.shape))) for n, p in self.engine.module.named_parameters()]
            self.state.phase_ends[self.phase.name] = phase_ends.save_phase_end(
                self.ckpt_root, self.phase.name, specs, engine_values(self.engine, self.frozen),
                self.train_stream.state_dict())

    def log(self, window: LogWindow) -> None:
        """The window's steps that were not skipped are the same on every rank (the skip decision is global)."""
        loss, seconds = None, window.seconds()
        if window.good:
            mean_loss = window.mean_loss()
            deepspeed.comm.all_reduce(mean_loss)
            loss = mean_loss.item() / self.world  # the one host sync of the logging interval
            if not math.isfinite(loss):  # only an engine that does not skip them lets a non-finite step through
                self.write_status("halted")
                raise Halted(f"training loss is {loss} at step {self.state.global_step} and the step was not "
                             f"skipped ({self.unskipped}), so the weights are not usable; not saving. "
                             f"Newest complete checkpoint: {self.last_saved or 'none'}")
            median = self.loss_spikes.check(loss)
            if median is not None and self.rank == 0:
                log.warning("loss spike at step %d: %.4f is %.1fx the median %.4f of the last %d logged losses",
                            self.state.global_step, loss, loss / median, median, len(self.loss_spikes.history) - 1)
        tps = self.last_tokens_per_s = window.tokens / max(seconds, 1e-9)
        self.step_seconds = seconds / max(window.timed, 1)
        grad_norm = self.engine.get_global_grad_norm()
        self.logger.log_step(self.state.global_step, self.total_steps, {
            "train/loss": loss, "train/lr": lr_at(self.phase, self.state.phase_step - 1),
            "train/grad_norm": None if grad_norm is None or not math.isfinite(grad_norm) else float(grad_norm),
            "train/tokens_per_s": tps, "train/mfu": None if self.peak is None else
            window.flops / max(seconds, 1e-9) / (self.peak * self.world),
            "train/phase": float(self.state.phase_index), "train/step": float(self.state.global_step),
            "train/epoch": float(self.train_stream.epoch),
            "data/skipped_shards": float(len(skipped_shards(self.train_stream))),
            "train/skipped_steps": float(self.bad_steps.total),
            "train/tokens_seen": float(self.state.tokens_seen)}, self.step_seconds, self.device)
        self.write_status("running")

    def maybe_eval(self, phase_done: bool) -> bool:
        """Validate when due; returns whether the phase is done (``xpt_ds.training.best``: early stopping)."""
        every = self.cfg.logging.eval_every
        if (self.valid_stream is None and self.cdlm_valid is None) or not (
                phase_done or (every and self.state.global_step % every == 0)):
            return phase_done
        metrics = self.evaluate()
        self.logger.log(self.state.global_step, metrics)
        if "valid/loss" in metrics:
            self._info(f"step {self.state.global_step}: valid loss {metrics['valid/loss']:.4f} "
                       f"ppl {metrics['valid/ppl']:.2f} hits@1 {metrics['valid/hits@1']:.3f} "
                       f"mrr {metrics['valid/mrr']:.3f}")
        cdlm = [f"{k.split('/')[1]} {v:.4f}" for k, v in metrics.items() if k.startswith("valid/cdlm") and
                k.endswith("/loss")]
        if cdlm:
            self._info(f"step {self.state.global_step}: valid CdLM loss {', '.join(cdlm)}")
        return self.best.on_validation(metrics, self.state, self.cfg.phases, self.device, self.rank) or phase_done

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """002 Table 2's metrics over the (seeded, hence fixed) validation masks; ``xpt_ds.evaluate`` runs the
        same computation on a checkpoint or an export. TreLM with data.parallel_valid_shards: also each CdLM
        direction's (``xpt_ds.trelm.valid``)."""
        self.engine.eval()
        metrics = {}
        if self.valid_stream is not None:
            self.valid_stream.load_state_dict({"sequences": 0})
            stats = MLMStats(self.device, self.char_lengths, self.word_starts, self.byte_lengths)
            for i, batch in enumerate(self.valid_stream):
                scored = scored_batch(i, self.cfg.logging.eval_batches, self.rank, self.world)
                if scored is None:
                    break
                batch = self._to_device(batch)
                logits = self.engine(**batch, return_logits=True)
                if scored:  # the first eval_batches global micro-batches, on any number of ranks
                    stats.update(logits, batch["mlm_targets"])
            stats.all_reduce()
            metrics = {f"valid/{k}": v for k, v in stats.result().items()
                       if k not in ("tokens", "chars", "words", "bytes")}
        if self.cdlm_valid is not None:
            metrics.update(self.cdlm_valid.evaluate(
                lambda batch, objective: self.engine(**self._to_device(batch), return_logits=True,
                                                     logits_for=objective),
                self.device, self.cfg.logging.eval_batches))
        self.engine.train()
        return metrics

    def maybe_save(self, phase_done: bool) -> None:
        every = self.cfg.checkpoint.every_steps
        if phase_done or (every and self.state.global_step % every == 0) or self.best.wants_save(self.state):
            self.save()

    def save(self) -> str:
        tag = checkpoint.tag_for(self.state.global_step)
        if not weights_finite(self.engine, self.optimizer, self.device):
            self.write_status("halted")
            raise Halted(f"weights are not finite at step {self.state.global_step}: checkpoint {tag} not written "
                         f"(a non-finite update went through; {self.unskipped}). Newest complete checkpoint: "
                         f"{self.last_saved or 'none'}")
        sums = self.exchange.gather([self.window.loss_sum.item()])[:, 0].tolist()  # collective, as the save is
        client = {"trainer": self.state.state_dict(), "data": self.train_stream.state_dict(),
                  "log_window": self.window.state_dict(sums),
                  "bad_steps": self.bad_steps.state_dict(), "best": self.best.state_dict(), "config": to_dict(self.cfg),
                  "embedding_init": self.embedding_init, "tags": saved_tags(self.tags)}
        checkpoint.save(self.engine, self.ckpt_root, tag, client, self.frozen, self.hf_config, self.tok.path)
        self.last_saved = tag
        if self.rank == 0:
            self.best.write(self.run_dir)  # after its checkpoint is complete
            for old in checkpoint.prune(self.ckpt_root, self.cfg.checkpoint.keep_last, self.best.protected):
                log.info("deleted checkpoint %s (keep_last=%d)", old, self.cfg.checkpoint.keep_last)
            for old in checkpoint.remove_incomplete(self.ckpt_root):
                log.info("deleted incomplete checkpoint %s", old)
        self._info(f"saved checkpoint {tag}")
        self.write_status("running")
        return tag

    @torch.no_grad()
    def close(self) -> None:
        """Stop the data loaders' worker processes (they ignore stop signals) and the logger."""
        for stream in filter(None, (self.train_stream, self.valid_stream)):
            stream.close()
        self.logger.close()
        if self.status is not None:
            self.status.close()

    def count_bad_step(self, skipped: bool) -> bool:
        """Count a skipped step; True when too many in a row (the same on every rank: the norm is global)."""
        halt = self.bad_steps.update(skipped)
        if skipped:
            self._info(f"step {self.state.global_step}: loss or gradient norm not finite, update skipped "
                       f"({self.bad_steps.in_a_row} in a row, {self.bad_steps.total} in all)")
        return halt

    def after_step(self, halt: bool, seconds: float) -> None:
        """Once per step, on every rank: one host exchange, the slow-step check, then halt or preemption."""
        rows = self.exchange.gather([self.preemption.level, seconds, self.data_wait, self.budget.lap()])
        self.budget.add(self.state, float(rows[:, 3].max()))  # the slowest rank's: the same sum on every rank
        line = self.slow_steps.check(self.state.global_step, rows[:, 1:3])
        if line is not None and self.rank == 0:
            log.warning(line)
        if halt:
            self._save_unless_saved()
            self.write_status("halted")
            raise Halted(f"{self.bad_steps.in_a_row} steps in a row had a non-finite loss or gradient norm (more "
                         f"than guard.max_bad_steps={self.cfg.guard.max_bad_steps}); stopped at step "
                         f"{self.state.global_step} with checkpoint {self.last_saved}")
        if rows[:, 0].max() > 0:  # some rank got SIGUSR1/SIGTERM, or Ctrl-C (2: then every rank says interrupted)
            self.interrupted = bool(rows[:, 0].max() >= 2)
            self._save_unless_saved()
            self.write_status("interrupted" if self.interrupted else "preempted")
            raise Preempted(self.last_saved)

    def _save_unless_saved(self) -> None:
        if self.last_saved != checkpoint.tag_for(self.state.global_step):
            self.save()

    def write_status(self, state: str, **extra) -> None:
        if self.rank != 0:
            return
        s, total = self.state, self.state.global_step if state == "finished" else self.total_steps
        eta = (total - s.global_step) * self.step_seconds if self.step_seconds is not None else None
        self.status.write(state=state, phase=self.phase.name, phase_index=s.phase_index,
                          phase_step=s.phase_step, global_step=s.global_step, total_steps=total,
                          tokens_seen=s.tokens_seen, target_tokens_seen=s.target_tokens_seen,
                          skipped_steps=self.bad_steps.total, last_complete_checkpoint=self.last_saved,
                          tokens_per_s=self.last_tokens_per_s, eta_s=eta, **self.budget.status(s), **extra)
