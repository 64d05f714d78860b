"""The target model's module tree without its values, and storage for it.

``skeleton`` builds the architecture an HF config describes (with xpt-ds's additions: adapters, LoRA, TreLM)
without storage for a single weight: every parameter on the meta device, buffers as the constructors make them
(rotary frequencies, position ids: small, and computed from the config), no initialiser run. Under ZeRO-3 it is
built inside ``deepspeed.zero.Init`` instead, so that each rank allocates only its partition of each parameter as
the module is constructed. The builder then gives each parameter storage in the engine's dtype on its device
(``materialize``, ZeRO 0-2) and fills it once (``xpt_ds.training.fill``), or, in one process (export, evaluate,
tests), makes each parameter its float32 value directly (``assign``). Nothing is initialised at random and then
overwritten, and no rank ever holds the whole model in float32 unless float32 is what it trains in.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn


def full_shape(p: torch.Tensor) -> tuple[int, ...]:
    """A parameter's shape, also under ZeRO-3, where it holds only this rank's 1-D partition (``ds_shape``)."""
    return tuple(getattr(p, "ds_shape", p.shape))


@contextlib.contextmanager
def parameters_on_meta():
    """Every parameter a module registers while this is open goes to the meta device; buffers stay as made. (The
    constructors' own empty tensors are allocated and dropped untouched: a large one is only address space.)"""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def no_init_weights():
    """transformers' context that skips ``torch.nn.init`` and ``init_weights`` while a model is constructed."""
    from transformers.initialization import no_init_weights as skip
    return skip()


def _partitioned_init():
    """``deepspeed.zero.Init``, less its broadcast of every new parameter's values from rank 0 before partitioning
    it (``Init._zero_init_param``, DeepSpeed 0.19): the values are unset here, and every rank writes its partition
    of each afterwards (``xpt_ds.training.fill``); the broadcast moved the whole model (1B: 4.6 GB in float32) over
    the network for nothing. A DeepSpeed without that method gets the plain Init."""
    import deepspeed

    class PartitionedInit(deepspeed.zero.Init):
        def _zero_init_param(self, param):
            self._convert_to_deepspeed_param(param)
            param.partition()

    return PartitionedInit if hasattr(deepspeed.zero.Init, "_zero_init_param") else deepspeed.zero.Init


def skeleton(tcfg, zero3: dict | None = None) -> nn.Module:
    """The model of HF config ``tcfg`` without values: parameters on the meta device, or with ``zero3`` (a DeepSpeed
    config dict at stage 3) partitioned over the ranks as ``deepspeed.zero.Init`` constructs them, in the dtype
    the config computes in."""
    from xpt_ds.model.methods.adapters import add_adapters
    from xpt_ds.model.decoder import decoder_skeleton, is_decoder
    from xpt_ds.model.methods.extensions import all_extensions
    if zero3 is not None:
        # dtype from the config: DeepSpeed 0.19.8's Init takes a dtype given to it for float16 wherever the
        # accelerator supports float16, and else for bfloat16 (an operator-precedence slip in Init._set_dtype)
        storage = _partitioned_init()(config_dict_or_path=zero3)
    else:
        storage = parameters_on_meta()
    with no_init_weights(), storage:
        if is_decoder(tcfg):
            model = decoder_skeleton(tcfg)
        else:
            from transformers import AutoModelForMaskedLM
            model = AutoModelForMaskedLM.from_config(_plain(tcfg), attn_implementation="sdpa", dtype=torch.float32)
            if getattr(tcfg, "xpt_adapter_size", None):
                add_adapters(model, tcfg.xpt_adapter_size)
            for extension in all_extensions():  # each adds what tcfg asks of it (TreLM's parts)
                extension.add_modules(model, tcfg)
    model.tie_weights()  # init_weights ties a tied head, and no_init_weights skipped it
    return model


def _plain(tcfg):
    """A copy of ``tcfg`` for ``from_config`` (which may set attributes on the config it is given)."""
    import copy
    return copy.deepcopy(tcfg)


def _replace(model: nn.Module, make: Callable[[str, nn.Parameter], nn.Parameter]) -> None:
    """Every parameter of ``model`` replaced by ``make(name, old)``, tied parameters by one shared replacement, and
    so are the references DeepSpeed's ``register_external_parameter`` keeps (TreLM's English decoder: ZeRO-3
    gathers what a module registers)."""
    names = {id(p): n for n, p in model.named_parameters()}
    new: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is None:
                continue
            if id(p) not in new:
                new[id(p)] = make(names[id(p)], p)
            module._parameters[key] = new[id(p)]
    for module in model.modules():
        external = getattr(module, "_external_params", None)
        if external:
            module._external_params = {id(new.get(k, p)): new.get(k, p) for k, p in external.items()}


def materialize(model: nn.Module, dtype: torch.dtype, device: torch.device | str,
                adopt: Callable[[str], torch.Tensor | None] | None = None) -> None:
    """Give every meta parameter storage of ``dtype`` on ``device``, unset (``xpt_ds.training.fill`` sets it); or,
    where ``adopt(name)`` gives a tensor of that shape (a phase hand-over: the previous engine's own copy of a value
    it kept), that tensor, so that a value the two engines hold alike is not held twice."""
    def make(name: str, p: nn.Parameter) -> nn.Parameter:
        taken = adopt(name) if adopt is not None else None
        if taken is not None and tuple(taken.shape) == tuple(p.shape):
            return nn.Parameter(taken, requires_grad=p.requires_grad)
        return nn.Parameter(torch.empty(p.shape, dtype=dtype, device=device), requires_grad=p.requires_grad)
    _replace(model, make)


@torch.no_grad()
def assign(model: nn.Module, values: Callable[[str], torch.Tensor]) -> nn.Module:
    """Make every parameter of a meta skeleton its value ``values(name)`` (float32, used as it is, not copied);
    returns ``model``."""
    def make(name: str, p: nn.Parameter) -> nn.Parameter:
        value = values(name)
        if tuple(value.shape) != tuple(p.shape):
            raise ValueError(f"{name}: a value of shape {tuple(value.shape)} for a parameter of {tuple(p.shape)}")
        return nn.Parameter(value, requires_grad=p.requires_grad)
    _replace(model, make)
    return model
