"""DeepSpeed engine per phase: engine-only JSON + injected batch/optimizer settings.

DeepSpeed ignores ``requires_grad`` changes made after ``deepspeed.initialize`` under ZeRO 1/2/3
(DeepSpeed issues #1767, #5639), so every phase gets a freshly built module and engine. Only trainable
parameters are handed to the optimizer, so frozen ones get no gradient, optimizer state or fp32 master.
The module comes without values (``engine_module``); ``xpt_ds.training.fill`` writes each parameter's exact fp32
value into the engine's copy in its dtype and into its fp32 master after ``deepspeed.initialize``, so a bf16 engine
never rounds a master.
"""
from __future__ import annotations

import difflib
import json
import logging
import typing
from collections.abc import KeysView
from importlib import resources
from pathlib import Path

import deepspeed
import torch
from deepspeed.runtime.config import DeepSpeedConfig, DeepSpeedConfigError
from deepspeed.runtime.config_utils import DeepSpeedConfigModel
from pydantic import BaseModel, ValidationError
from torch import nn

from xpt_ds.config import ConfigError, ModelConfig, OptimConfig, TrainConfig
from xpt_ds.config.engine_json import precision, zero_stage
from xpt_ds.config.engine_support import unsupported
from xpt_ds.config.manager import parse_json
from xpt_ds.config.template import CPU_ENGINE, CPU_SPEEDUP
from xpt_ds.model.forward.objective import build_objective
from xpt_ds.model.skeleton import full_shape, materialize, skeleton
from xpt_ds.model.weight_decay import decays
from xpt_ds.runtime.op_builds import check_arch_list, check_build_lock, fused_adam_is_jit_built
from xpt_ds.training.adamw import ChunkedAdamW
from xpt_ds.model.forward.recompute import checkpoint_layers
from xpt_ds.training.compile import compile_blocks

log = logging.getLogger(__name__)

# Keys a DeepSpeed JSON may not set, and where the value comes from instead.
OWNED_KEYS = {
    "train_batch_size": "optim.micro_batch_size x optim.grad_accum x world size",
    "train_micro_batch_size_per_gpu": "optim.micro_batch_size",
    "gradient_accumulation_steps": "optim.grad_accum",
    "gradient_clipping": "optim.grad_clip",
    "optimizer": "optim.* (optim.torch_adam picks the implementation)",
    "scheduler": "phases[*].lr / warmup_steps / decay",
}


OFFLOADS = ("offload_param", "offload_optimizer")  # zero_optimization's sections


def _all_keys(d) -> list[str]:
    if isinstance(d, dict):
        return [k for k, v in d.items() for k in [k, *_all_keys(v)]]
    return [k for v in d for k in _all_keys(v)] if isinstance(d, list) else []


def shipped_ds_configs() -> dict[str, str]:
    """The engine configs installed with the package (``ds_configs/*.json``): name -> JSON text."""
    return {f.name: f.read_text() for f in resources.files("ds_configs").iterdir() if f.name.endswith(".json")}


def read_ds_config_text(path: str) -> str:
    """A DeepSpeed JSON's text: the file ``path`` if it exists, else the shipped config of that name
    (``zero2_bf16``, ``zero2_bf16.json`` or ``ds_configs/zero2_bf16.json``), so configs that name a shipped
    engine config work from any directory."""
    p = Path(path)
    if p.is_file():
        return p.read_text()
    name = p.name if p.suffix == ".json" else p.name + ".json"
    shipped = shipped_ds_configs()
    if p.parent in (Path("."), Path("ds_configs")) and name in shipped:
        return shipped[name]
    raise ConfigError(f"config key 'deepspeed': DeepSpeed JSON not found: {path} (shipped: "
                      f"{', '.join(sorted(n[:-5] for n in shipped))})")


def no_skip_reason(ds: dict) -> str | None:
    """Why the engine of DeepSpeed config ``ds`` lets a step with non-finite gradients through instead of skipping
    it; None where it skips one (xpt_ds.training.guards). DeepSpeed 0.19.8: stage 0 has no check; ZeRO 1-2 test a
    bf16 model's gradients only under ``bf16.check_grad_overflow`` (a host sync per step; fp32 models' through the
    gradient norm), ZeRO-3 always."""
    stage = zero_stage(ds)
    if stage == 0:
        return "ZeRO stage 0 cannot skip one"
    bf16 = ds.get("bf16") or ds.get("bfloat16") or {}
    if stage < 3 and bf16.get("enabled") and bf16.get("check_grad_overflow", True) is False:
        return "the DeepSpeed JSON's bf16.check_grad_overflow is false"
    return None


def load_ds_config(path: str) -> dict:
    try:
        ds = parse_json(read_ds_config_text(path), f"DeepSpeed JSON {path}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"DeepSpeed JSON {path} does not parse: {e}") from None
    if not isinstance(ds, dict):
        raise ConfigError(f"DeepSpeed JSON {path} must be an object, got {type(ds).__name__}")
    zero = ds.get("zero_optimization")
    sections = {key: ds[key] for key in ("zero_optimization", "bf16", "bfloat16", "fp16") if key in ds}
    if isinstance(zero, dict):
        sections.update({f"zero_optimization.{key}": zero[key] for key in OFFLOADS if key in zero})
    for key, value in sections.items():  # read with .get() here, by DeepSpeed and by the checks below
        if not isinstance(value, dict):
            raise ConfigError(f"DeepSpeed JSON {path}: {key} must be an object, got {json.dumps(value)}")
    for key, owner in OWNED_KEYS.items():
        if key in ds:
            raise ConfigError(f"DeepSpeed JSON {path} sets '{key}'; it comes from the run config ({owner})")
    for key in _all_keys(ds):
        if key in ("lr", "learning_rate"):
            raise ConfigError(f"DeepSpeed JSON {path} sets a learning rate ('{key}'); it comes from phases[*].lr")
    try:
        stage = zero_stage(ds)
    except (AttributeError, TypeError, ValueError):
        stage = None
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"DeepSpeed JSON {path}: zero_optimization.stage must be 0, 1, 2 or 3, got "
                          f"{(ds.get('zero_optimization') or {}).get('stage')!r}")
    if stage == 0 and precision(ds) == "bf16":
        raise ConfigError(f"DeepSpeed JSON {path}: bf16 needs ZeRO stage >= 1 here (stage 0 keeps no exportable "
                          "fp32 master); use ds_configs/zero1_bf16.json")
    if stage == 0 and precision(ds) == "fp16":  # its fp16 optimizer's masters are not filled here
        raise ConfigError(f"DeepSpeed JSON {path}: fp16 needs ZeRO stage >= 1 here (stage 0's fp16 optimizer keeps "
                          "fp32 masters that xpt-ds neither fills nor exports); set zero_optimization.stage to 1")
    for section in OFFLOADS:  # else an assertion deep inside ZeRO-3's Init
        offload = ds.get("zero_optimization", {}).get(section, {})
        if offload.get("device") == "nvme" and not offload.get("nvme_path"):
            raise ConfigError(f"DeepSpeed JSON {path}: zero_optimization.{section}.device is nvme but "
                              f"zero_optimization.{section}.nvme_path is not set (a directory on a local NVMe drive)")
    return ds


def check_device_support(ds: dict, path: str) -> None:
    """Refuse a precision this machine's accelerator lacks (fp16 on CPU) before the model is built, not as a
    ValueError from deepspeed.initialize. bf16 on the CPU runs, with one warning line (rank 0): on a CPU without
    bf16 instructions it is several times slower a step than fp32 (docs/config.md, "On CPU")."""
    accelerator = deepspeed.get_accelerator()
    for key, supported in (("fp16", accelerator.is_fp16_supported), ("bf16", accelerator.is_bf16_supported)):
        section = ds.get(key) or (ds.get("bfloat16") if key == "bf16" else None) or {}
        if isinstance(section, dict) and section.get("enabled") and not supported():
            raise ConfigError(f"DeepSpeed JSON {path}: {key}.enabled is true, but this machine's "
                              f"{accelerator.device_name()} accelerator does not support {key}")
    rank = deepspeed.comm.get_rank() if deepspeed.comm.is_initialized() else 0
    if accelerator.device_name() == "cpu" and compute_dtype(ds) == torch.bfloat16 and rank == 0:
        log.warning("DeepSpeed JSON %s trains in bf16 on the CPU: the demo's setup steps ~%dx as fast with %s and "
                    "optim.torch_adam: true on a CPU without bf16 instructions (docs/config.md, On CPU)", path,
                    CPU_SPEEDUP, CPU_ENGINE)


def engine_settings(cfg: TrainConfig) -> dict:
    """The engine JSON as the user wrote it, checked before the model is built: by DeepSpeed's own config parser
    (``check_with_deepspeed``), for the settings xpt-ds cannot train with (``engine_support``), and against this
    machine: the precision its accelerator supports, and the attention kernel it can train (``model.attention``)."""
    ds = load_ds_config(cfg.deepspeed)
    world = deepspeed.comm.get_world_size() if deepspeed.comm.is_initialized() else 1
    check_with_deepspeed(build_ds_config(cfg, world), cfg.deepspeed)
    why = unsupported(ds, cfg.optim.torch_adam, deepspeed.get_accelerator().device_name())
    if why is not None:
        raise ConfigError(f"DeepSpeed JSON {cfg.deepspeed}: {why}")
    check_device_support(ds, cfg.deepspeed)
    check_attention_device(cfg.model)
    return ds


class _ReadKeys(dict):
    """An engine config that records the top-level keys DeepSpeed's parser looks up in it (``DeepSpeedConfig``
    copies it with copy.copy and reads it by get, [] and ``in``), so that the keys DeepSpeed knows come from the
    installed DeepSpeed, not from a list here that its next version outdates."""

    def __init__(self, ds: dict, read: list | None = None):
        super().__init__(ds)
        self.read = [] if read is None else read  # in lookup order: the last is the section being parsed

    def __copy__(self):
        return _ReadKeys(self, self.read)

    def get(self, key, default=None):
        self.read.append(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.append(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.read.append(key)
        return super().__contains__(key)

    def keys(self):  # its __contains__ is ours: ``key in param_dict.keys()``
        return KeysView(self)


def check_with_deepspeed(ds: dict, path: str) -> None:
    """DeepSpeed's own checks of ``ds``, the dict ``deepspeed.initialize`` will get, before the model is built.
    DeepSpeed 0.19.8 parses it first in ``deepspeed.initialize``, where a misspelt key inside a section is a
    pydantic traceback, and it ignores a top-level key it does not read: ``zero_optimisation`` would train at ZeRO
    stage 0. Either is one ConfigError naming the key, with the known key spelt closest."""
    where = f"config key 'deepspeed': DeepSpeed {deepspeed.__version__} refuses {path}"
    seen = _ReadKeys(ds)
    try:
        DeepSpeedConfig(seen)
    except ValidationError as e:
        raise ConfigError(f"{where}: {_validation_problems(e, ds, seen.read)}") from None
    except (AssertionError, DeepSpeedConfigError, AttributeError, KeyError, TypeError, ValueError) as e:
        bare = isinstance(e, (AttributeError, KeyError, TypeError)) and seen.read  # a value of the wrong kind
        reading = f" (reading '{seen.read[-1]}')" if bare else ""
        raise ConfigError(f"{where}{reading}: {(str(e) or type(e).__name__).splitlines()[0]}") from None
    for key in ds:
        if key not in seen.read:
            raise ConfigError(f"{where}: top-level key '{key}' is no DeepSpeed setting (it would be ignored)"
                              + _did_you_mean(key, set(seen.read)))


def _did_you_mean(key: str, known) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def _validation_problems(e: ValidationError, ds: dict, read: list) -> str:
    """pydantic's errors for one of DeepSpeed's config sections on one line: each error's dotted key in ``ds``,
    its message and value, and for an unknown key the section's key spelt closest."""
    problems = []
    for err in e.errors():
        loc = tuple(str(part) for part in err["loc"])
        if err["type"] == "extra_forbidden":
            hint = _did_you_mean(loc[-1], _model_keys(e.title, loc[:-1]))
            problems.append(f"{_locate(ds, loc, read)} is no DeepSpeed setting{hint}")
        else:
            problems.append(f"{_locate(ds, loc, read)}: {err['msg']}, got {err.get('input')!r}")
    return "; ".join(problems)


def _locate(ds: dict, loc: tuple, read: list) -> str:
    """The dotted key in ``ds`` of a pydantic error's ``loc``, which starts inside the section being parsed
    (``overlap_com`` is zero_optimization.overlap_com, ``enabled`` timers.throughput.enabled): the path that ends
    so, under the top-level key DeepSpeed read last where several do; else that key and ``loc``."""
    def paths(d: dict, prefix: tuple):
        for k, v in d.items():
            yield (*prefix, k)
            if isinstance(v, dict):
                yield from paths(v, (*prefix, k))

    section = next((k for k in reversed(read) if isinstance(ds.get(k), dict)), None)
    ends = [p for p in paths(ds, ()) if p[-len(loc):] == loc]
    ends = [p for p in ends if p[0] == section] or ends
    return ".".join(ends[0] if len(ends) == 1 else (section, *loc) if section else loc)


def _model_keys(title: str, parents: tuple) -> set[str]:
    """The keys DeepSpeed's pydantic config model named ``title`` takes at ``parents`` inside it (field names
    and aliases); empty where that is not a model."""
    def subclasses(cls):
        return [s for c in cls.__subclasses__() for s in (c, *subclasses(c))]

    model = {m.__name__: m for m in subclasses(DeepSpeedConfigModel)}.get(title)
    for part in parents:
        field = model.model_fields.get(part) if model is not None else None
        types = (field.annotation, *typing.get_args(field.annotation)) if field is not None else ()
        model = next((t for t in types if isinstance(t, type) and issubclass(t, BaseModel)), None)
    if model is None:
        return set()
    return {name for n, f in model.model_fields.items() for name in (n, f.alias) if name}


def check_attention_device(model: ModelConfig) -> None:
    """FlexAttention (``model.attention: flex``) trains on CUDA only: torch has no backward for it on the CPU."""
    name = deepspeed.get_accelerator().device_name()
    if model.attention == "flex" and name != "cuda":
        raise ConfigError(f"config key 'model.attention' is 'flex', which trains on CUDA only (torch has no "
                          f"FlexAttention backward on {name}); use 'sdpa'")


def build_ds_config(cfg: TrainConfig, world_size: int, load_universal: bool = False) -> dict:
    """The dict ``deepspeed.initialize`` gets: the run's engine JSON and the settings the trainer owns;
    ``load_universal``: the engine will load a universal checkpoint (resume at another scale)."""
    ds = load_ds_config(cfg.deepspeed)
    if load_universal:
        ds.setdefault("checkpoint", {})["load_universal"] = True
    o = cfg.optim
    ds.update(train_micro_batch_size_per_gpu=o.micro_batch_size, gradient_accumulation_steps=o.grad_accum,
              train_batch_size=o.micro_batch_size * o.grad_accum * world_size, gradient_clipping=o.grad_clip,
              steps_per_print=10 ** 9, wall_clock_breakdown=False)
    if o.torch_adam:  # a client torch optimizer under ZeRO (and ZeRO-Offload) needs these flags
        ds.update(zero_allow_untested_optimizer=True, zero_force_ds_cpu_optimizer=False)
    return ds


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (decay if decays(name, full_shape(p)) else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, o: OptimConfig, ds: dict) -> torch.optim.Optimizer:
    groups = _param_groups(model, o.weight_decay)
    if o.torch_adam:
        return ChunkedAdamW(groups, lr=0.0, betas=tuple(o.betas), eps=o.eps, foreach=False)
    if ds.get("zero_optimization", {}).get("offload_optimizer", {}).get("device") == "cpu":
        from deepspeed.ops.adam import DeepSpeedCPUAdam  # ZeRO-Offload steps on the host
        check_build_lock("CPUAdamBuilder")
        return DeepSpeedCPUAdam(groups, lr=0.0, betas=tuple(o.betas), eps=o.eps, adamw_mode=True)
    if fused_adam_is_jit_built():
        check_arch_list()
    check_build_lock("FusedAdamBuilder")
    from deepspeed.ops.adam import FusedAdam
    return FusedAdam(groups, lr=0.0, betas=tuple(o.betas), eps=o.eps, adam_w_mode=True)


def compute_dtype(ds: dict) -> torch.dtype:
    """The dtype the engine of DeepSpeed config ``ds`` keeps the module in (it casts a float32 module to it)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision(ds)]


def engine_module(tcfg, cfg: TrainConfig, kept=None) -> nn.Module:
    """The training module of HF config ``tcfg`` (its objective wrapping the HF model) without values, ready for
    ``build_engine``: under ZeRO-3 built in ``deepspeed.zero.Init`` (each rank allocates its partition), else on the
    meta device and given empty storage in the compute dtype on this rank's device, or the storage ``kept`` (the
    previous phase's values, ``xpt_ds.checkpoint.frozen.ShardedValues``) holds of a parameter already.
    ``xpt_ds.training.fill`` then sets every value once."""
    ds = build_ds_config(cfg, deepspeed.comm.get_world_size())
    if zero_stage(ds) == 3:
        hf = skeleton(tcfg, zero3=ds)
    else:
        hf = skeleton(tcfg)
        dtype, device = compute_dtype(ds), deepspeed.get_accelerator().current_device_name()
        adopt = None if kept is None else lambda name: kept.local(f"hf.{name}", dtype, device)
        materialize(hf, dtype, device, adopt)
    return build_objective(hf, attention=cfg.model.attention)


def loss_scale(engine) -> float | None:
    """The loss scale of an fp16 engine that scales dynamically, before its next step; None for bf16 and fp32
    engines and a static ``fp16.loss_scale``. DeepSpeed's ZeRO scaler would end the run with a bare Exception at
    an overflow at its minimum scale; it is told not to (again before each step: a loaded checkpoint brings its
    own scaler), so that such steps count as bad steps (``guards.StepGuards``) and halt with a checkpoint."""
    if not (engine.fp16_enabled() and engine.dynamic_loss_scale()):
        return None
    scaler = getattr(engine.optimizer, "loss_scaler", None)
    if hasattr(scaler, "raise_error_at_min_scale"):
        scaler.raise_error_at_min_scale = False
    return float(engine.optimizer.loss_scale)


def build_engine(model: nn.Module, trainable: set[str], cfg: TrainConfig, load_universal: bool = False):
    """A new engine for one phase over ``model`` (``engine_module``'s, values unset): (engine, optimizer).
    ``load_universal``: the engine will load a universal checkpoint (resume at another scale)."""
    for name, p in model.named_parameters():
        p.requires_grad_(name in trainable)
    ds = build_ds_config(cfg, deepspeed.comm.get_world_size(), load_universal)
    optimizer = build_optimizer(model, cfg.optim, ds)
    if cfg.compile:
        compile_blocks(model, zero_stage(ds))
    if cfg.activations.checkpoint_every:  # on every engine: a phase switch builds a new module
        checkpoint_layers(model.hf, cfg.activations.checkpoint_every)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds)
    return engine, optimizer


def unkept_grad_norm(engine) -> torch.Tensor | None:
    """The global L2 norm of the gradients before clipping, as a device tensor, for an engine that does not keep
    it: DeepSpeed 0.19.8 at ZeRO stage 0 computes it to clip (``clip_fp32_gradients``) but drops it, so
    ``get_global_grad_norm`` stays None. Called at the accumulation boundary after the last ``engine.backward``
    (the gradients are averaged across ranks there, as the clip sees them) and before ``engine.step``; it only
    reads them, so the update is the same. None where the engine keeps its own (ZeRO stages 1-3)."""
    if engine.zero_optimization_stage() != 0:
        return None
    norms = [p.grad.detach().float().norm(2) for p in engine.module.parameters() if p.grad is not None]
    return torch.stack(norms).pow(2).sum().sqrt() if norms else None


def destroy_engine(engine) -> None:
    """``engine.destroy()``, and what it leaves referenced let go. DeepSpeed 0.19.8's ZeRO-3 hooks define autograd
    Function classes (``DeepSpeedZeRoOffload._register_deepspeed_module``) whose closures outlive the engine, and
    every ZeRO-3 parameter keeps the optimizer (``_z3_optimizer``): a phase's parameters, fp32 partitions and Adam
    moments stayed in memory through the next phase (measured: 1.9 GB a rank at a 1B shape, 2 ranks). The
    caller has kept what it needs of the values; the module's parameters, the parameters' DeepSpeed state and the
    optimizer's state are dropped here, so whatever still references them holds empty objects."""
    module, optimizer = engine.module, engine.optimizer
    engine.destroy()
    params = list(module.parameters())
    for m in module.modules():
        m._parameters.clear()
    for p in params:
        p.__dict__.clear()
        p.data = torch.empty(0, dtype=p.dtype, device=p.device)
    base = getattr(optimizer, "optimizer", optimizer)
    if isinstance(base, torch.optim.Optimizer):
        base.state.clear()
    if optimizer is not None and optimizer is not base:
        vars(optimizer).clear()
    for key, value in list(vars(engine).items()):  # the engine's own tensors (the last global grad norm, ...)
        if torch.is_tensor(value):
            vars(engine)[key] = None


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
