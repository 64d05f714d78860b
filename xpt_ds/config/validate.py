"""``validate``: every check of a loaded config that needs no files. A bad config raises one ConfigError that lists
every problem found, one line each naming its key, in the order of the checks (litgpt's ``validate_args`` does the
same): a user fixes them all in one edit instead of one per run. Checks that span phases are in
``xpt_ds.config.phase_checks``."""
from __future__ import annotations

import math
import re
from typing import Callable, Iterable, Iterator

from xpt_ds.config.embedding_args import EMBEDDING_INITS, check_args
from xpt_ds.config.job import (
    ATTENTIONS,
    DECAYS,
    MASKINGS,
    MIX_PERIOD,
    ConfigError,
    DataConfig,
    ModelConfig,
    PhaseConfig,
    TrainConfig,
)
from xpt_ds.config.methods import METHODS, Method
from xpt_ds.config.phase_checks import check_objectives, check_phase_start, mix_weights

_KEY = re.compile(r"config keys? '([^']+)'")


def _first_per_key(found: Iterable[str]) -> list[str]:
    """``found`` less each problem that names a config key already named by an earlier one: it follows from that
    one (an unknown embedding_init that a method then cannot use; an objective that reads data.train_shards,
    which is empty)."""
    lines, keys = [], set()
    for line in found:
        named = set(_KEY.findall(line))
        if not named & keys:
            lines.append(line)
        keys |= named
    return lines


def _caught(check: Callable[..., None], *args) -> Iterator[str]:
    """The problem of a check that raises at its first one (``phase_checks``), as lines."""
    try:
        check(*args)
    except ConfigError as e:
        yield from str(e).splitlines()


def validate(cfg: TrainConfig) -> None:
    """Checks that need no files; model/tokenizer/phase-pattern checks live with their builders. Raises one
    ConfigError whose message is every problem of ``problems``, a line each."""
    found = problems(cfg)
    if found:
        raise ConfigError("\n".join(found))


def problems(cfg: TrainConfig) -> list[str]:
    """Every problem of ``cfg``, each a one-line message naming its key, in the order of the checks."""
    return _first_per_key(_problems(cfg))


def _problems(cfg: TrainConfig) -> Iterator[str]:
    """A check whose premise already failed is skipped: with an unknown model.method nothing that asks what the
    method does runs, nor do the checks of phase names that are missing or repeated."""
    method = METHODS.get(cfg.model.method)
    if not cfg.run_dir.strip():  # else the run writes into the current directory (--run_dir=$UNSET_VARIABLE)
        yield f"config key 'run_dir' is empty ({cfg.run_dir!r}); give the run's output directory"
    yield from _model_problems(cfg.model, method)
    yield from _phase_problems(cfg)
    yield from _phase1_extra_problems(cfg, method)
    yield from _data_problems(cfg, method)
    if method is not None and cfg.phases:  # objectives are checked against the method's traits and the phases
        yield from _caught(check_objectives, cfg)
    yield from _optim_problems(cfg)
    yield from _activation_problems(cfg)
    m = cfg.model
    if not m.dropout < 1 or m.dropout != m.dropout:
        yield f"config key 'model.dropout' must be in [0, 1) (negative: the source's), got {m.dropout}"
    if cfg.checkpoint.every_steps < 0:
        yield (f"config key 'checkpoint.every_steps' must be >= 0 (0 = phase ends only), got "
               f"{cfg.checkpoint.every_steps}")
    if cfg.checkpoint.keep_last < 0:
        yield f"config key 'checkpoint.keep_last' must be >= 0, got {cfg.checkpoint.keep_last}"
    if not 0 < cfg.checkpoint.rescale_timeout_minutes < math.inf:
        yield (f"config key 'checkpoint.rescale_timeout_minutes' must be a finite number > 0, got "
               f"{cfg.checkpoint.rescale_timeout_minutes}")
    yield from _logging_problems(cfg)
    yield from _guard_problems(cfg)
    yield from _best_problems(cfg)
    yield from _profile_problems(cfg)
    yield from _limit_problems(cfg)


SEED_MAX = 2 ** 63 - 1  # torch.manual_seed's largest ("Overflow when unpacking long long" past it)
SIZE_MAX = 2 ** 16  # an adapter's width, a LoRA rank, a micro-batch: far past any model's
DAYS = 365  # the longest wait a timeout may set (a larger one overflowed timedelta or the timer's clock)


def _limit_problems(cfg: TrainConfig) -> Iterator[str]:
    """Upper bounds where a value past them was a traceback (an overflow in torch, timedelta or a timer) or an
    allocation of that size after the model's build (2026-12-04), and the steps and names that were silently
    ignored."""
    for key, value in (("seed", cfg.seed), ("model.init_seed", cfg.model.init_seed), ("data.seed", cfg.data.seed)):
        if value > SEED_MAX:
            yield f"config key '{key}' must be at most {SEED_MAX} (2**63 - 1), got {value}"
    for key, value in (("model.adapter_size", cfg.model.adapter_size), ("model.lora.rank", cfg.model.lora.rank),
                       ("optim.micro_batch_size", cfg.optim.micro_batch_size)):
        if value > SIZE_MAX:
            yield f"config key '{key}' must be at most {SIZE_MAX}, got {value}"
    if cfg.data.masking == "span" and cfg.data.span_max > cfg.data.seq_len:
        yield (f"config key 'data.span_max' must be at most data.seq_len={cfg.data.seq_len} (a span is cut from one "
               f"row), got {cfg.data.span_max}")
    for key, value, unit in (("guard.collective_timeout_s", cfg.guard.collective_timeout_s, 86400),
                             ("checkpoint.rescale_timeout_minutes", cfg.checkpoint.rescale_timeout_minutes, 1440),
                             ("guard.max_train_minutes", cfg.guard.max_train_minutes, 1440)):
        if math.isfinite(value) and value > DAYS * unit:
            yield f"config key '{key}' must be at most {DAYS * unit} ({DAYS} days), got {value:g}"
    bad = [s for s in cfg.guard.inject_nan_steps if s < 1]
    if bad:
        yield f"config key 'guard.inject_nan_steps' holds steps below 1 (global steps count from 1): {bad}"
    for i, ph in enumerate(cfg.phases):
        if ph.name and not ph.name.strip():
            yield f"config key 'phases[{i}].name' is blank ({ph.name!r}); give the phase a name"


def _model_problems(m: ModelConfig, method: Method | None) -> Iterator[str]:
    if method is None:
        yield f"config key 'model.method' is '{m.method}'; valid: {', '.join(METHODS)}"
    if m.itl_init not in ("random", "copy"):
        yield f"config key 'model.itl_init' is '{m.itl_init}'; valid: random, copy"
    if m.itl_init == "copy" and method is not None and not (method.has_itl and method.source != "none"):
        yield (f"config key 'model.itl_init' is 'copy', but model.method '{m.method}' has "
               f"{'no source layers to copy' if method.has_itl else 'no ITLs'}")
    if m.attention not in ATTENTIONS:
        yield f"config key 'model.attention' is '{m.attention}'; valid: {', '.join(ATTENTIONS)}"
    if m.head_bias_init not in ("zero", "unigram"):
        yield f"config key 'model.head_bias_init' is '{m.head_bias_init}'; valid: zero, unigram"
    if m.head_bias_init == "unigram" and method is not None and method.vocab == "source":
        yield (f"config key 'model.head_bias_init' is 'unigram', but model.method '{m.method}' keeps the source's "
               "vocabulary and head bias; use zero (the default)")
    if not m.source:
        yield "config key 'model.source' is required (hub id or local path)"
    try:
        m.embedding_init_args = check_args(m.embedding_init, m.embedding_init_args)
    except ConfigError as e:
        yield str(e)
    known = m.embedding_init in EMBEDDING_INITS and method is not None
    if known and method.source == "none" and m.embedding_init != "random":  # every other start reads the source
        yield (f"config key 'model.embedding_init' is '{m.embedding_init}', but model.method '{m.method}' uses "
               "nothing of the source (002 §4.2) and that start reads its embeddings; use random (the default)")
    if m.adapter_size < 1:
        yield f"config key 'model.adapter_size' must be >= 1, got {m.adapter_size}"
    yield from _lora_problems(m)
    if method is not None:  # a setting the method never reads would look like part of the run's recipe
        default = ModelConfig()
        for key, reader, reads in (("adapter_size", "adapters", method.adapters), ("lora", "lora", method.lora)):
            if not reads and getattr(m, key) != getattr(default, key):
                yield (f"config key 'model.{key}' is set but model.method is '{m.method}' (only {reader} reads it)")
        if m.mask_token and method.vocab != "target":  # build_hf_tokenizer takes the tokenizer's own (or none)
            sp = ", ".join(k for k, v in METHODS.items() if v.vocab == "target")
            yield (f"config key 'model.mask_token' is set but model.method is '{m.method}', which masks with the "
                   f"Hugging Face tokenizer's own mask token, if any (only the SentencePiece methods read it: {sp})")
    if not m.tokenizer and method is not None and method.vocab == "target":
        yield "config key 'model.tokenizer' is required (SentencePiece .model file)"
    if not m.tokenizer and method is not None and method.vocab == "extend":
        yield ("config key 'model.tokenizer' is required for method extend (the directory `xpt-data extend-vocab` "
               "writes)")


def _phase1_extra_problems(cfg: TrainConfig, method: Method | None) -> Iterator[str]:
    """model.phase1_trains_position_and_head widens a two-phase preset's phase 1 (``xpt_ds.model.phases``). Where
    phase 1 does not train everything anyway and there is no such preset to widen (lora, extend; a phase 1 that
    lists its own patterns), it would do nothing, without a word."""
    key = "config key 'model.phase1_trains_position_and_head' is true, but"
    if not cfg.model.phase1_trains_position_and_head or method is None or not cfg.phases:
        return
    own = cfg.phases[0].trainable
    if own:
        if "@all" not in own and not {"@position", "@lm_head"} <= set(own):
            yield (f"{key} phases[0].trainable lists its own patterns, which it does not widen; add '@position' and "
                   "'@lm_head' to them instead")
    elif method.presets[0] != ("@all",) and not (method.phase1_extra and len(method.presets) > 1):
        widened = [m.name for m in METHODS.values() if m.phase1_extra and len(m.presets) > 1]
        yield (f"{key} model.method '{method.name}' has no two-phase preset whose phase 1 it widens (it applies to "
               f"{', '.join(widened)}; in a sweep, scope it: --set xpt:model.phase1_trains_position_and_head=true)")


def _phase_problems(cfg: TrainConfig) -> Iterator[str]:
    if not cfg.phases:
        yield "config key 'phases' is empty; give at least one phase with steps and lr"
        return
    for i, ph in enumerate(cfg.phases):
        key = f"phases[{i}]"
        if not ph.name:
            yield f"config key '{key}.name' is required"
        if ph.steps <= 0:
            yield f"config key '{key}.steps' must be > 0, got {ph.steps}"
        if not 0 < ph.lr < math.inf:  # also refuses nan
            yield f"config key '{key}.lr' must be a finite number > 0, got {ph.lr}"
        if not 0 <= ph.warmup_steps <= ph.steps and ph.steps > 0:  # a bad step count is reported alone
            yield f"config key '{key}.warmup_steps' must be in [0, steps={ph.steps}], got {ph.warmup_steps}"
        if ph.decay not in DECAYS:
            yield f"config key '{key}.decay' is '{ph.decay}'; valid: {', '.join(DECAYS)}"
        if not 0.0 <= ph.min_lr_ratio <= 1.0:
            yield f"config key '{key}.min_lr_ratio' must be in [0, 1], got {ph.min_lr_ratio}"
        elif ph.decay == "constant" and ph.min_lr_ratio != PhaseConfig.min_lr_ratio:
            yield (f"config key '{key}.min_lr_ratio' is set but {key}.decay is 'constant' (only linear and cosine "
                   "read it)")
    names = [ph.name for ph in cfg.phases]
    if not all(names):  # reported above; two unnamed phases are not duplicates, nor can a phase start from one
        return
    if len(set(names)) != len(names):
        yield f"config key 'phases' has duplicate names: {names}"
        return
    for i, ph in enumerate(cfg.phases):
        yield from _caught(check_phase_start, i, ph, names)


def _data_problems(cfg: TrainConfig, method: Method | None) -> Iterator[str]:
    d = cfg.data
    if not d.train_shards:
        yield "config key 'data.train_shards' is empty"
    if d.seq_len < 8:
        yield f"config key 'data.seq_len' must be >= 8, got {d.seq_len}"
    if not (0 < d.mask_prob < 1 and d.mask_replace_prob >= 0 and d.random_replace_prob >= 0
            and d.mask_replace_prob + d.random_replace_prob <= 1):  # written so that nan fails too
        yield "config keys 'data.mask_*' must satisfy 0<mask_prob<1 and replace fractions summing to <= 1"
    yield from _masking_problems(d)
    if d.on_corrupt_shard not in ("fail", "skip"):
        yield f"config key 'data.on_corrupt_shard' is '{d.on_corrupt_shard}'; valid: fail, skip"
    if d.train_tokens < 0:
        yield f"config key 'data.train_tokens' must be >= 0 (0 = all), got {d.train_tokens}"
    elif 0 < d.train_tokens < d.seq_len:  # 1: every row was separators, loss 0.0000, 'finished' without a word
        yield (f"config key 'data.train_tokens' must be 0 (all) or at least data.seq_len={d.seq_len} (each row "
               f"would repeat the same few tokens), got {d.train_tokens}")
    if d.seed < 0:  # numpy's generators take no negative seed
        yield f"config key 'data.seed' must be >= 0, got {d.seed}"
    if d.num_workers < 0:
        yield f"config key 'data.num_workers' must be >= 0, got {d.num_workers}"
    if d.parallel_shards and method is not None and not method.trelm:
        yield (f"config key 'data.parallel_shards' is set but model.method '{cfg.model.method}' reads no parallel "
               "data (only trelm does)")
    if d.source_shards and method is not None and not method.trelm:
        yield (f"config key 'data.source_shards' is set but model.method '{cfg.model.method}' reads no English text "
               "(only trelm does)")
    if d.parallel_micro_batch < 0:
        yield f"config key 'data.parallel_micro_batch' must be >= 0, got {d.parallel_micro_batch}"
    elif d.parallel_micro_batch and method is not None and not method.trelm:
        yield (f"config key 'data.parallel_micro_batch' is set but model.method '{cfg.model.method}' reads no "
               "parallel data (only trelm does)")
    yield from _mix_problems(cfg)


_MIX_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _mix_problems(cfg: TrainConfig) -> Iterator[str]:
    """data.mix: named corpora with shards and weights that leave data.train_shards a share (``xpt_ds.data.mixture``
    resolves weights to 1/MIX_PERIOD); phases[i].mix: weights of those corpora, 0 allowed."""
    d = cfg.data
    names = [m.name for m in d.mix]
    for i, m in enumerate(d.mix):
        key = f"config key 'data.mix[{i}]"
        if not _MIX_NAME.fullmatch(m.name) or m.name == "train" or m.name.startswith("cdlm"):
            yield (f"{key}.name' is {m.name!r}: give a name of letters, digits, '_', '-' or '.' (not 'train', "
                   "data.train_shards' own, nor cdlm*, TreLM's validation's)")
        elif names.count(m.name) > 1:
            yield f"{key}.name' {m.name!r} names two data.mix entries"
        if not m.shards:
            yield f"{key}.shards' is empty"
        if not 0 < m.weight < 1:
            yield f"{key}.weight' must be between 0 and 1 (a fraction of the training sequences), got {m.weight}"
        elif m.weight < 1 / MIX_PERIOD:
            yield f"{key}.weight' {m.weight} is below the mixture's resolution, 1/{MIX_PERIOD}"
    total = sum(m.weight for m in d.mix)
    if d.mix and all(0 < m.weight < 1 for m in d.mix) and 1 - total < 1 / MIX_PERIOD:
        yield (f"config key 'data.mix' weights sum to {total:g}, leaving data.train_shards no share: they must sum "
               f"to at most {1 - 1 / MIX_PERIOD:g}")
    for i, ph in enumerate(cfg.phases):
        key = f"config key 'phases[{i}].mix"
        for name, w in ph.mix.items():
            if name not in names:
                yield f"{key}' names {name!r}, which is no data.mix corpus ({', '.join(names) or 'data.mix is empty'})"
            elif isinstance(w, bool) or not isinstance(w, (int, float)) or not (w == 0 or 1 / MIX_PERIOD <= w < 1):
                yield f"{key}.{name}' must be 0 or a weight from 1/{MIX_PERIOD} to below 1, got {w!r}"
        weights_ok = all(0 < m.weight < 1 for m in d.mix)  # else the bad data.mix weight said it (not each phase)
        if weights_ok and all(isinstance(w, (int, float)) for w in ph.mix.values()) and \
                mix_weights(cfg, i)[0] < 1 / MIX_PERIOD:
            yield (f"{key}' leaves data.train_shards no share in that phase: its corpora's weights sum to "
                   f"{1 - mix_weights(cfg, i)[0]:g}")


def _optim_problems(cfg: TrainConfig) -> Iterator[str]:
    o = cfg.optim
    for k in ("micro_batch_size", "grad_accum"):
        if getattr(o, k) < 1:
            yield f"config key 'optim.{k}' must be >= 1, got {getattr(o, k)}"
    if len(o.betas) != 2:
        yield f"config key 'optim.betas' must have 2 values, got {o.betas}"
    else:
        for i, b in enumerate(o.betas):
            if not 0 <= b < 1:
                yield f"config key 'optim.betas[{i}]' must be in [0, 1), got {b}"
    if not 0 < o.eps < math.inf:  # 0: Adam divides 0 by 0 wherever a gradient is 0 (a halt at step 1)
        yield (f"config key 'optim.eps' must be a finite number > 0 (Adam divides by sqrt(v) + eps, and v is 0 "
               f"where a gradient is), got {o.eps}")
    if not 0 <= o.weight_decay < math.inf:
        yield f"config key 'optim.weight_decay' must be a finite number >= 0, got {o.weight_decay}"
    if not 0 <= o.grad_clip < math.inf:
        yield f"config key 'optim.grad_clip' must be a finite number >= 0 (0 = off), got {o.grad_clip}"


def _logging_problems(cfg: TrainConfig) -> Iterator[str]:
    lg = cfg.logging
    if lg.log_every < 1:
        yield f"config key 'logging.log_every' must be >= 1, got {lg.log_every}"
    if lg.eval_every < 0:
        yield f"config key 'logging.eval_every' must be >= 0 (0 = phase ends only), got {lg.eval_every}"
    if lg.eval_batches < 0:
        yield f"config key 'logging.eval_batches' must be >= 0 (0 = the whole validation set), got {lg.eval_batches}"
    if not 0 <= lg.peak_tflops < math.inf:
        yield f"config key 'logging.peak_tflops' must be a finite number >= 0 (0 = the default), got {lg.peak_tflops}"


def _guard_problems(cfg: TrainConfig) -> Iterator[str]:
    g = cfg.guard
    if g.max_bad_steps < 0:
        yield f"config key 'guard.max_bad_steps' must be >= 0, got {g.max_bad_steps}"
    for k in ("loss_spike_ratio", "slow_step_ratio"):
        if getattr(g, k) != 0 and not getattr(g, k) > 1:  # also refuses nan
            yield f"config key 'guard.{k}' must be > 1 (or 0 = off), got {getattr(g, k)}"
    for k in ("loss_spike_window", "slow_step_window"):
        if getattr(g, k) < 2:
            yield f"config key 'guard.{k}' must be >= 2, got {getattr(g, k)}"
    default = type(g)()
    for window, ratio in (("loss_spike_window", "loss_spike_ratio"), ("slow_step_window", "slow_step_ratio")):
        if getattr(g, ratio) == 0 and getattr(g, window) != getattr(default, window):
            yield f"config key 'guard.{window}' is set but guard.{ratio} is 0 (off; only its check reads it)"
    if not 0 <= g.max_train_minutes < math.inf:
        yield (f"config key 'guard.max_train_minutes' must be a finite number >= 0 (0 = off), got "
               f"{g.max_train_minutes}")
    if not 0 <= g.collective_timeout_s < math.inf:
        yield (f"config key 'guard.collective_timeout_s' must be a finite number >= 0 (0 = DeepSpeed's default), "
               f"got {g.collective_timeout_s}")


def _lora_problems(m: ModelConfig) -> Iterator[str]:
    lo = m.lora
    if lo.rank < 1:
        yield f"config key 'model.lora.rank' must be >= 1, got {lo.rank}"
    if not 0 < lo.alpha < math.inf:
        yield f"config key 'model.lora.alpha' must be > 0, got {lo.alpha}"
    if not 0 <= lo.dropout < 1:
        yield f"config key 'model.lora.dropout' must be in [0, 1), got {lo.dropout}"


def _activation_problems(cfg: TrainConfig) -> Iterator[str]:
    every = cfg.activations.checkpoint_every
    if every < 0:
        yield f"config key 'activations.checkpoint_every' must be >= 0 (0 = off), got {every}"
    elif every and cfg.compile:  # the two together are untested: compiling on 2 CPU cores takes minutes
        yield ("config key 'activations.checkpoint_every' is set with compile: true; use one of them "
               "(activation checkpointing under torch.compile is not tested here)")


def _best_problems(cfg: TrainConfig) -> Iterator[str]:
    """checkpoint.keep_best and early stopping read valid/loss: they need validation shards, and early stopping
    needs validation passes inside a phase (without logging.eval_every there is only the one at its end)."""
    g = cfg.guard
    if g.early_stop_patience < 0:
        yield f"config key 'guard.early_stop_patience' must be >= 0 (0 = off), got {g.early_stop_patience}"
    elif g.early_stop_rewind and not (cfg.checkpoint.keep_best and g.early_stop_patience > 0):
        yield ("config key 'guard.early_stop_rewind' needs checkpoint.keep_best: true and "
               "guard.early_stop_patience > 0 (it rewinds to the best checkpoint when early stopping ends a phase)")
    if not 0 <= g.early_stop_min_delta < math.inf:
        yield f"config key 'guard.early_stop_min_delta' must be a finite number >= 0, got {g.early_stop_min_delta}"
    elif g.early_stop_min_delta != type(g)().early_stop_min_delta and g.early_stop_patience == 0:
        yield ("config key 'guard.early_stop_min_delta' is set but guard.early_stop_patience is 0 (off; only early "
               "stopping reads it)")
    for key, on in (("checkpoint.keep_best", cfg.checkpoint.keep_best),
                    ("guard.early_stop_patience", g.early_stop_patience > 0)):
        if on and not cfg.data.valid_shards:
            yield f"config key '{key}' needs valid/loss, but data.valid_shards is empty (no validation)"
    if g.early_stop_patience > 0 and cfg.logging.eval_every <= 0:
        yield ("config key 'guard.early_stop_patience' needs validation passes inside a phase, but "
               "logging.eval_every is 0 (phase ends only)")


def _profile_problems(cfg: TrainConfig) -> Iterator[str]:
    """profile.*: a window of steps that the run reaches, after warmup steps it has; nothing set while it is off.
    The ranks against the job's world size are checked when the job starts (``xpt_ds.metrics.profiler``)."""
    p, default = cfg.profile, type(cfg.profile)()
    if p.start_step < 0:
        yield f"config key 'profile.start_step' must be >= 0 (0 = off), got {p.start_step}"
        return
    if p.start_step == 0:
        changed = [k for k in ("steps", "warmup", "every", "ranks", "record_shapes", "memory", "with_stack")
                   if getattr(p, k) != getattr(default, k)]
        if changed:
            yield (f"config key 'profile.{changed[0]}' is set but profile.start_step is 0 (off; set the first step "
                   "to profile)")
        return
    if p.steps < 1:
        yield f"config key 'profile.steps' must be >= 1, got {p.steps}"
    if p.warmup < 0:
        yield f"config key 'profile.warmup' must be >= 0, got {p.warmup}"
    elif p.start_step - p.warmup < 1:
        yield (f"config key 'profile.start_step' is {p.start_step}, which leaves no room before it for its "
               f"profile.warmup={p.warmup} (global steps count from 1): start at step {p.warmup + 1} or later")
    if p.every and p.every < p.warmup + max(p.steps, 1):
        yield (f"config key 'profile.every' must be 0 (once) or at least profile.warmup + profile.steps = "
               f"{p.warmup + p.steps} (one profile at a time), got {p.every}")
    last = sum(ph.steps for ph in cfg.phases)
    if cfg.phases and p.steps >= 1 and p.start_step + p.steps - 1 > last:
        yield (f"config key 'profile.start_step': its profile of steps {p.start_step}-{p.start_step + p.steps - 1} "
               f"ends past the run's last step {last} (the phases' steps)")
    if not p.ranks or min(p.ranks) < 0 or len(set(p.ranks)) < len(p.ranks):
        yield f"config key 'profile.ranks' must list distinct global ranks >= 0, got {p.ranks}"


def decoder_problems(m: ModelConfig, d: DataConfig) -> list[str]:
    """The masking keys set where ``model.source`` is a decoder, which trains on every next token: nothing reads
    them (``xpt_ds.model.preflight.check_source`` knows the source's kind from its config.json; data.masking is
    refused there)."""
    default, lines = DataConfig(), []
    for key in ("mask_prob", "mask_replace_prob", "random_replace_prob"):
        if getattr(d, key) != getattr(default, key):
            lines.append(f"config key 'data.{key}' is {getattr(d, key)}, but model.source is a decoder, which trains "
                         f"on every next token (nothing is masked); leave it at {getattr(default, key)}")
    if m.mask_token:
        lines.append(f"config key 'model.mask_token' is {m.mask_token!r}, but model.source is a decoder, which "
                     "trains on every next token (nothing is masked); leave it empty")
    return lines


def _masking_problems(d: DataConfig) -> Iterator[str]:
    """data.masking and the span keys, which only data.masking span reads."""
    if d.masking not in MASKINGS:
        yield f"config key 'data.masking' is '{d.masking}'; valid: {', '.join(MASKINGS)}"
    else:  # an unknown masking would call every span key set
        default = DataConfig()
        for key in ("span_p", "span_max"):
            if d.masking != "span" and getattr(d, key) != getattr(default, key):
                yield f"config key 'data.{key}' is set but data.masking is '{d.masking}' (only span reads it)"
    if not 0 < d.span_p < 1:
        yield f"config key 'data.span_p' must be in (0, 1), got {d.span_p}"
    if d.span_max < 1:
        yield f"config key 'data.span_max' must be >= 1, got {d.span_max}"

