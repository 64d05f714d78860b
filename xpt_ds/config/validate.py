"""``validate``: every check of a loaded config that needs no files, each failure a one-line ConfigError that
names the key. Checks that span phases are in ``xpt_ds.config.phase_checks``."""
from __future__ import annotations

import math

from xpt_ds.config.embedding_args import check_args
from xpt_ds.config.job import (
    DECAYS,
    MASKINGS,
    ConfigError,
    DataConfig,
    ModelConfig,
    TrainConfig,
)
from xpt_ds.config.methods import METHODS
from xpt_ds.config.phase_checks import check_objectives, check_phase_start


def check_lora(m: ModelConfig) -> None:
    lo = m.lora
    if lo.rank < 1:
        raise ConfigError(f"config key 'model.lora.rank' must be >= 1, got {lo.rank}")
    if not 0 < lo.alpha < math.inf:
        raise ConfigError(f"config key 'model.lora.alpha' must be > 0, got {lo.alpha}")
    if not 0 <= lo.dropout < 1:
        raise ConfigError(f"config key 'model.lora.dropout' must be in [0, 1), got {lo.dropout}")


def validate(cfg: TrainConfig) -> None:
    """Checks that need no files; model/tokenizer/phase-pattern checks live with their builders."""
    m = cfg.model
    if m.method not in METHODS:
        raise ConfigError(f"config key 'model.method' is '{m.method}'; valid: {', '.join(METHODS)}")
    if m.itl_init not in ("random", "copy"):
        raise ConfigError(f"config key 'model.itl_init' is '{m.itl_init}'; valid: random, copy")
    if m.itl_init == "copy" and not (METHODS[m.method].has_itl and METHODS[m.method].source != "none"):
        raise ConfigError(f"config key 'model.itl_init' is 'copy', but model.method '{m.method}' has "
                          f"{'no source layers to copy' if METHODS[m.method].has_itl else 'no ITLs'}")
    if m.head_bias_init not in ("zero", "unigram"):
        raise ConfigError(f"config key 'model.head_bias_init' is '{m.head_bias_init}'; valid: zero, unigram")
    if m.head_bias_init == "unigram" and METHODS[m.method].vocab != "target":
        raise ConfigError(f"config key 'model.head_bias_init' is 'unigram', but model.method '{m.method}' keeps the "
                          "source's vocabulary and head bias; use zero (the default)")
    if not m.source:
        raise ConfigError("config key 'model.source' is required (hub id or local path)")
    m.embedding_init_args = check_args(m.embedding_init, m.embedding_init_args)
    if METHODS[m.method].source == "none" and m.embedding_init != "random":  # every other start reads the source
        raise ConfigError(f"config key 'model.embedding_init' is '{m.embedding_init}', but model.method "
                          f"'{m.method}' uses nothing of the source (002 §4.2) and that start reads its embeddings; "
                          "use random (the default)")
    check_lora(m)
    if not m.tokenizer and METHODS[m.method].vocab == "target":
        raise ConfigError("config key 'model.tokenizer' is required (SentencePiece .model file)")
    if not cfg.phases:
        raise ConfigError("config key 'phases' is empty; give at least one phase with steps and lr")
    for i, ph in enumerate(cfg.phases):
        key = f"phases[{i}]"
        if not ph.name:
            raise ConfigError(f"config key '{key}.name' is required")
        if ph.steps <= 0:
            raise ConfigError(f"config key '{key}.steps' must be > 0, got {ph.steps}")
        if not 0 < ph.lr < math.inf:  # also refuses nan
            raise ConfigError(f"config key '{key}.lr' must be a finite number > 0, got {ph.lr}")
        if not 0 <= ph.warmup_steps <= ph.steps:
            raise ConfigError(f"config key '{key}.warmup_steps' must be in [0, steps={ph.steps}], got {ph.warmup_steps}")
        if ph.decay not in DECAYS:
            raise ConfigError(f"config key '{key}.decay' is '{ph.decay}'; valid: {', '.join(DECAYS)}")
        if not 0.0 <= ph.min_lr_ratio <= 1.0:
            raise ConfigError(f"config key '{key}.min_lr_ratio' must be in [0, 1], got {ph.min_lr_ratio}")
    names = [ph.name for ph in cfg.phases]
    if len(set(names)) != len(names):
        raise ConfigError(f"config key 'phases' has duplicate names: {names}")
    for i, ph in enumerate(cfg.phases):
        check_phase_start(i, ph, names)
    if not cfg.data.train_shards:
        raise ConfigError("config key 'data.train_shards' is empty")
    if cfg.data.seq_len < 8:
        raise ConfigError(f"config key 'data.seq_len' must be >= 8, got {cfg.data.seq_len}")
    d = cfg.data
    if not 0 < d.mask_prob < 1 or d.mask_replace_prob + d.random_replace_prob > 1 or min(
            d.mask_replace_prob, d.random_replace_prob) < 0:
        raise ConfigError("config keys 'data.mask_*' must satisfy 0<mask_prob<1 and replace fractions summing to <= 1")
    check_masking(d)
    if d.on_corrupt_shard not in ("fail", "skip"):
        raise ConfigError(f"config key 'data.on_corrupt_shard' is '{d.on_corrupt_shard}'; valid: fail, skip")
    if d.train_tokens < 0:
        raise ConfigError(f"config key 'data.train_tokens' must be >= 0 (0 = all), got {d.train_tokens}")
    if d.seed < 0:  # numpy's generators take no negative seed
        raise ConfigError(f"config key 'data.seed' must be >= 0, got {d.seed}")
    if d.num_workers < 0:
        raise ConfigError(f"config key 'data.num_workers' must be >= 0, got {d.num_workers}")
    if d.parallel_shards and not METHODS[m.method].trelm:
        raise ConfigError(f"config key 'data.parallel_shards' is set but model.method '{m.method}' reads no "
                          "parallel data (only trelm does)")
    if d.source_shards and not METHODS[m.method].trelm:
        raise ConfigError(f"config key 'data.source_shards' is set but model.method '{m.method}' reads no English "
                          "text (only trelm does)")
    if d.parallel_micro_batch < 0:
        raise ConfigError(f"config key 'data.parallel_micro_batch' must be >= 0, got {d.parallel_micro_batch}")
    check_objectives(cfg)
    o = cfg.optim
    for k in ("micro_batch_size", "grad_accum"):
        if getattr(o, k) < 1:
            raise ConfigError(f"config key 'optim.{k}' must be >= 1, got {getattr(o, k)}")
    if len(o.betas) != 2:
        raise ConfigError(f"config key 'optim.betas' must have 2 values, got {o.betas}")
    for i, b in enumerate(o.betas):
        if not 0 <= b < 1:
            raise ConfigError(f"config key 'optim.betas[{i}]' must be in [0, 1), got {b}")
    if not 0 <= o.eps < math.inf:
        raise ConfigError(f"config key 'optim.eps' must be a finite number >= 0, got {o.eps}")
    if not 0 <= o.weight_decay < math.inf:
        raise ConfigError(f"config key 'optim.weight_decay' must be a finite number >= 0, got {o.weight_decay}")
    if not 0 <= o.grad_clip < math.inf:
        raise ConfigError(f"config key 'optim.grad_clip' must be a finite number >= 0 (0 = off), got {o.grad_clip}")
    check_activations(cfg)
    if not m.dropout < 1 or m.dropout != m.dropout:
        raise ConfigError(f"config key 'model.dropout' must be in [0, 1) (negative: the source's), got {m.dropout}")
    if cfg.checkpoint.every_steps < 0:
        raise ConfigError(f"config key 'checkpoint.every_steps' must be >= 0 (0 = phase ends only), got "
                          f"{cfg.checkpoint.every_steps}")
    if cfg.checkpoint.keep_last < 0:
        raise ConfigError(f"config key 'checkpoint.keep_last' must be >= 0, got {cfg.checkpoint.keep_last}")
    if cfg.logging.log_every < 1:
        raise ConfigError(f"config key 'logging.log_every' must be >= 1, got {cfg.logging.log_every}")
    g = cfg.guard
    if g.max_bad_steps < 0:
        raise ConfigError(f"config key 'guard.max_bad_steps' must be >= 0, got {g.max_bad_steps}")
    for k in ("loss_spike_ratio", "slow_step_ratio"):
        if getattr(g, k) != 0 and getattr(g, k) <= 1:
            raise ConfigError(f"config key 'guard.{k}' must be > 1 (or 0 = off), got {getattr(g, k)}")
    for k in ("loss_spike_window", "slow_step_window"):
        if getattr(g, k) < 2:
            raise ConfigError(f"config key 'guard.{k}' must be >= 2, got {getattr(g, k)}")
    if not 0 <= g.max_train_minutes < math.inf:
        raise ConfigError(f"config key 'guard.max_train_minutes' must be a finite number >= 0 (0 = off), got "
                          f"{g.max_train_minutes}")
    check_best(cfg)


def check_activations(cfg: TrainConfig) -> None:
    every = cfg.activations.checkpoint_every
    if every < 0:
        raise ConfigError(f"config key 'activations.checkpoint_every' must be >= 0 (0 = off), got {every}")
    if every and cfg.compile:  # the two together are untested: compiling on 2 CPU cores takes minutes
        raise ConfigError("config key 'activations.checkpoint_every' is set with compile: true; use one of them "
                          "(activation checkpointing under torch.compile is not tested here)")


def check_best(cfg: TrainConfig) -> None:
    """checkpoint.keep_best and early stopping read valid/loss: they need validation shards, and early stopping
    needs validation passes inside a phase (without logging.eval_every there is only the one at its end)."""
    g = cfg.guard
    if g.early_stop_patience < 0:
        raise ConfigError(f"config key 'guard.early_stop_patience' must be >= 0 (0 = off), got {g.early_stop_patience}")
    if g.early_stop_rewind and not (cfg.checkpoint.keep_best and g.early_stop_patience > 0):
        raise ConfigError("config key 'guard.early_stop_rewind' needs checkpoint.keep_best: true and "
                          "guard.early_stop_patience > 0 (it rewinds to the best checkpoint when early stopping ends "
                          "a phase)")
    if g.early_stop_min_delta < 0:
        raise ConfigError(f"config key 'guard.early_stop_min_delta' must be >= 0, got {g.early_stop_min_delta}")
    for key, on in (("checkpoint.keep_best", cfg.checkpoint.keep_best), ("guard.early_stop_patience",
                                                                         g.early_stop_patience > 0)):
        if on and not cfg.data.valid_shards:
            raise ConfigError(f"config key '{key}' needs valid/loss, but data.valid_shards is empty (no validation)")
    if g.early_stop_patience > 0 and cfg.logging.eval_every <= 0:
        raise ConfigError("config key 'guard.early_stop_patience' needs validation passes inside a phase, but "
                          "logging.eval_every is 0 (phase ends only)")




def check_masking(d: DataConfig) -> None:
    """data.masking and the span keys, which only data.masking span reads."""
    if d.masking not in MASKINGS:
        raise ConfigError(f"config key 'data.masking' is '{d.masking}'; valid: {', '.join(MASKINGS)}")
    default = DataConfig()
    for key in ("span_p", "span_max"):
        if d.masking != "span" and getattr(d, key) != getattr(default, key):
            raise ConfigError(f"config key 'data.{key}' is set but data.masking is '{d.masking}' (only span reads it)")
    if not 0 < d.span_p < 1:
        raise ConfigError(f"config key 'data.span_p' must be in (0, 1), got {d.span_p}")
    if d.span_max < 1:
        raise ConfigError(f"config key 'data.span_max' must be >= 1, got {d.span_max}")
