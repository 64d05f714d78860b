"""``build_trainer(cfg)``: the trainer assembled from its components, each from its own builder, which makes its own
checks: the checkpointer (``Checkpointer.open``), the engine settings (``engine_settings``), the target model
(``plan_target``), the data (``open_streams``), the checkpoint to resume from, then whether each phase's model
states fit a rank (``memory_plan``). They run in the order that fails fast, before minutes of model building. Every
piece of checkpointed state registers with the checkpointer here, once (``register_state``)."""
from __future__ import annotations

import logging
import time
from pathlib import Path

import deepspeed
import torch

from xpt_ds.checkpoint import branches, store, tag_checks
from xpt_ds.checkpoint.checkpointer import Checkpointer
from xpt_ds.checkpoint.rng import seed_everything
from xpt_ds.checkpoint.tags import complete_tags
from xpt_ds.checkpoint.universal import prepare_rescale
from xpt_ds.config import ConfigError, TrainConfig, save_config, to_dict
from xpt_ds.data.scan_records import node_share
from xpt_ds.embedding_init.context import log_report
from xpt_ds.metrics.logger import LogWindow, MetricsLogger, flops_per_token, logging_problem, peak_flops
from xpt_ds.metrics.profiler import StepProfiler, check_ranks
from xpt_ds.model.build import build_plan, saved_tags
from xpt_ds.model.preflight import plan_target
from xpt_ds.model.decoder import is_decoder
from xpt_ds.runtime.preemption import PreemptionWatcher
from xpt_ds.runtime.status import StatusFile
from xpt_ds.model.forward.recompute import recomputed_layers
from xpt_ds.training.best import BestTracker
from xpt_ds.training.engine import engine_settings, loss_scale, no_skip_reason
from xpt_ds.training.guards import RankExchange, StepGuards
from xpt_ds.training.memory_plan import capacity, memory_problem, plan_line, plan_phases, whole_sizes
from xpt_ds.training.phase_engine import PhaseEngine
from xpt_ds.training.reporting import Reporter
from xpt_ds.training.state import TrainerState
from xpt_ds.training.streams import open_streams
from xpt_ds.training.time_budget import TimeBudget
from xpt_ds.training.trainer import Trainer
from xpt_ds.training.validation import Validator

log = logging.getLogger(__name__)


class WindowState:
    """The log window as a checkpoint piece: the steps not logged yet, with every rank's loss sum (a collective
    gather at save, as the save is), continued on any world size (``LogWindow.load_state_dict``)."""

    def __init__(self, window: LogWindow, exchange: RankExchange, rank: int, world: int):
        self.window, self.exchange, self.rank, self.world = window, exchange, rank, world

    def state_dict(self) -> dict:
        return self.window.state_dict(self.exchange.gather([self.window.loss_sum.item()])[:, 0].tolist())

    def load_state_dict(self, sd: dict) -> None:
        self.window.load_state_dict(sd, self.rank, self.world)


def register_state(checkpointer: Checkpointer, cfg: TrainConfig, state: TrainerState, streams, window: WindowState,
                   guards: StepGuards, best: BestTracker, embedding_init, tags: dict) -> None:
    """Everything a checkpoint's client state holds, in the order it is written; a new piece of state is one more
    line here (``xpt_ds.checkpoint.registry``)."""
    reg = checkpointer.registry
    reg.register("trainer", state)
    reg.register("data", streams)
    reg.register("log_window", window)
    reg.register("bad_steps", guards.bad_steps)
    reg.register("best", best)
    reg.record("config", lambda: to_dict(cfg))
    reg.record("embedding_init", lambda: embedding_init)
    reg.record("tags", lambda: saved_tags(tags))


def build_trainer(cfg: TrainConfig) -> Trainer:
    """Check, build, and (on a resume) restore every component; on a failure, nothing is left running. Each
    component's builder makes its own checks, in the order that fails fast."""
    rank, world = deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()
    check_ranks(cfg.profile, world)
    checkpointer = Checkpointer.open(Path(cfg.run_dir), cfg.checkpoint, rank)  # run_dir and checkpoints writable
    why = logging_problem(Path(cfg.run_dir), cfg.logging.tensorboard) if rank == 0 else None  # rank 0 logs
    if store.agree(why):
        raise ConfigError(why or "rank 0 cannot write its logs (see its error)")
    ds_config = engine_settings(cfg)  # the engine JSON against this machine
    tok, hf_config = plan_target(cfg)  # the model's checks, from config.json, before any weight is read
    checkpointer.hf_config, checkpointer.tokenizer = hf_config, tok.path
    causal = is_decoder(hf_config)  # next-token loss on the same packed rows (docs/decoders.md)
    streams = open_streams(cfg, tok, hf_config, rank, world, causal)
    try:
        return _assemble(cfg, rank, world, ds_config, tok, hf_config, causal, streams, checkpointer)
    except BaseException:
        streams.close()
        raise


def _assemble(cfg, rank, world, ds_config, tok, hf_config, causal, streams, checkpointer) -> Trainer:
    tag, client = checkpointer.resume_point(cfg.checkpoint.resume)
    plan = None  # a fresh start's build plan (xpt_ds.model.build), until its values are in the engine
    if tag is None:
        plan = build_plan(cfg.model, tok, cfg.data)
        tags, embedding_init = plan.tags, plan.embedding_init
    else:  # the parameters' tags and the first start's report, which every checkpoint carries
        tags = tag_checks.resumed_tags(checkpointer.root / tag, client, cfg.model, tok, hf_config)
        embedding_init = client.get("embedding_init")
    if rank == 0:
        log_report(embedding_init, cfg.model.embedding_init, tag, Path(cfg.run_dir))
    device = torch.device(deepspeed.get_accelerator().current_device_name())
    tokens_per_step = cfg.optim.micro_batch_size * cfg.optim.grad_accum * world * cfg.data.seq_len
    flops_per_step = flops_per_token(hf_config, cfg.data.seq_len, 1.0 if causal else cfg.data.mask_prob) * \
        tokens_per_step
    if (reason := no_skip_reason(ds_config)) and rank == 0:  # else DeepSpeed skips a non-finite step (guards)
        log.info(f"non-finite steps are not skipped ({reason}): a non-finite loss halts the run at the next log "
                 "step, and no checkpoint is written from non-finite weights")
    guards = StepGuards(cfg.guard, rank, world, unskipped=reason or "the engine did not skip it")
    best = BestTracker(cfg.checkpoint.keep_best, cfg.guard.early_stop_patience, cfg.guard.early_stop_min_delta,
                       cfg.guard.early_stop_rewind)
    state, window = TrainerState(), LogWindow(device)  # the window: the steps since the last log step
    register_state(checkpointer, cfg, state, streams, WindowState(window, guards.exchange, rank, world), guards,
                   best, embedding_init, tags)
    trainer = Trainer(
        cfg, hf_config, rank, world, device, streams, Validator(cfg, streams, tok, rank, world, device),
        PhaseEngine(cfg, hf_config, tags, rank), checkpointer, state, window, guards, best,
        TimeBudget(cfg.guard.max_train_minutes, cfg.phases),
        Reporter(MetricsLogger(Path(cfg.run_dir), rank == 0, cfg.logging.tensorboard, cfg.logging.progress_bar),
                 StatusFile(Path(cfg.run_dir)) if rank == 0 else None, world, device,
                 peak_flops(cfg.logging.peak_tflops)), PreemptionWatcher(rank=rank), (tokens_per_step, flops_per_step),
        causal, StepProfiler(cfg.profile, Path(cfg.run_dir), rank, world, device, sum(p.steps for p in cfg.phases)))
    streams.fork_workers()  # before any engine thread (xpt_ds.data.workers)
    try:
        _start(trainer, tag, client, plan, ds_config)
    except BaseException:
        trainer.close()  # its workers, TensorBoard writer and status heartbeat
        raise
    return trainer


def _start(t: Trainer, tag: str | None, client: dict | None, plan, ds_config: dict) -> None:
    """The first phase's engine: from the build plan, or restored from checkpoint ``tag``."""
    cfg, ckpt = t.cfg, t.checkpointer
    seed_everything(cfg.seed + t.rank)  # dropout stream of this rank, unless a checkpoint has it
    rescale = None
    if tag is not None:
        tag_checks.check_files(ckpt.root / tag, cfg.checkpoint.allow_pickle)  # before DeepSpeed unpickles them
        missing = ckpt.restore_client(client)
        if missing and t.rank == 0:  # an older checkpoint than these pieces of state: they start fresh
            log.info("checkpoint %s holds no %s (written before they were saved): they start fresh", tag,
                     ", ".join(missing))
        tag_checks.check_resumed_phase(ckpt.root / tag, client, cfg,
                                       lambda i: t.engines.names - t.engines.trainables[i])
        position = (t.state.phase_index, t.state.phase_updates)
        for line in tag_checks.resume_warnings(ckpt.root / tag, client, cfg, t.hf_config, t.streams.valid is not None,
                                               t.world, ds_config, position) if t.rank == 0 else []:
            log.warning(line)
        tag_checks.keep_start_settings(client, cfg)  # what built the weights: config.yaml and the card say so
    index = t.state.phase_index
    _memory_plan(t, index, ds_config)  # before a conversion of minutes to resume at another scale
    if tag is not None:
        rescale = prepare_rescale(ckpt.root, tag, client, t.world, ds_config, cfg.checkpoint.rescale_timeout_minutes,
                                  cfg.checkpoint.allow_pickle)
    t.streams.use_phase(cfg, index)
    started = time.perf_counter()
    t.engines.build(index, universal=rescale == "universal")
    t.info(f"engine built on an empty skeleton in {time.perf_counter() - started:.1f} s")
    if tag is None:
        t.engines.fill_fresh(plan, index)
    else:
        started = time.perf_counter()
        if rescale == "values":  # its optimizer holds no state: a new one is the same; its values are all it has
            values = ckpt.restore_values(tag)
            t.engines.fill_from(values, index, f"values of {tag}")
            if values.loss_scale is not None and loss_scale(t.engine) is not None:
                t.engine.optimizer.loss_scale = values.loss_scale  # fp16: the scale its skipped steps found
            t.info(f"engine state of {tag} set from its fp32 values in {time.perf_counter() - started:.1f} s")
            t.engines.frozen.file = values.frozen.path
        else:
            frozen_file = ckpt.restore_engine(t.engine, tag, rescale == "universal")
            t.info(f"engine state of {tag} loaded{' from its universal copy' if rescale else ''} in "
                   f"{time.perf_counter() - started:.1f} s")
            t.engines.fill_from(frozen_file.get, index, f"frozen weights of {tag}",
                                names=t.engines.frozen_names(index))
            t.engines.frozen.file = frozen_file.path
        t.info(f"resumed from {tag}: phase {index} step {t.state.phase_step}, global step {t.state.global_step}")
        if t.state.phase_step > t.phase.steps and t.rank == 0:  # the config shrank a phase
            log.warning("checkpoint %s is at step %d of phase '%s', past its phases[%d].steps=%d: that phase "
                        "ends here, with the steps it already took", tag, t.state.phase_step, t.phase.name, index,
                        t.phase.steps)
    if cfg.checkpoint.resume != "auto":  # a new branch: what the abandoned one wrote after tag moves aside, once
        kept = set(client["trainer"]["phase_ends"]) if tag is not None else set()  # the start has loaded
        branches.start_branch(ckpt.root, tag, kept, t.rank)  # (a refused or failed one leaves the run as it was)
    t.best.restore(Path(cfg.run_dir), complete_tags(ckpt.root), t.rank)
    if t.rank == 0 and (kept := save_config(cfg, Path(cfg.run_dir) / "config.yaml", t.state.global_step)):
        t.info(f"config.yaml: changed since the last start; the one that ran up to here is kept as "
               f"{kept.relative_to(cfg.run_dir)}")
    t.logger.start(t.state.global_step, t.total_steps)
    sizes = t.engines.sizes()
    t.info(f"model: {sum(sizes.values()):,} parameters; phase '{t.phase.name}' trains "
            f"{sum(sizes[n] for n in t.engines.trainables[index]):,} on {t.objective_names()}; "
            f"{t.engines.frozen.summary()}")
    if (plan := t.profiler.plan()) is not None:
        t.info(plan)
    if cfg.activations.checkpoint_every:
        recompute, layers = recomputed_layers(t.engine.module.hf)
        t.info(f"activation checkpointing: {recompute} of {layers} layers recompute in the backward")
    if t.streams.valid is None:  # logging.eval_every and eval_batches then do nothing: said, not silent
        t.info("validation: none (data.valid_shards is empty): no valid/* rows, and logging.eval_every and "
               "logging.eval_batches do nothing")


def _memory_plan(t: Trainer, index: int, ds_config: dict) -> None:
    """Rank 0 logs the model states a rank holds in each phase still to run; a phase they cannot fit in is refused
    (``guard.memory_check``) before the first engine is built, on every rank if on any (a node with less memory
    than rank 0's)."""
    sizes = {f"hf.{n}": k for n, k in whole_sizes(t.hf_config).items()}
    phases = plan_phases([p.name for p in t.cfg.phases][index:], sizes, t.engines.trainables[index:], ds_config,
                         t.world)
    cap = capacity(t.device, node_share()[1])
    t.info(plan_line(phases, ds_config, t.world, cap))
    if not t.cfg.guard.memory_check:
        return
    why = memory_problem(phases, ds_config, t.world, cap)
    if store.agree(why):
        raise ConfigError(why or "another rank's memory cannot hold a phase's model states (see its error)")
