"""What a rank must hold for each phase's model states, counted from the engine JSON and the parameter counts alone,
before an engine is built; and the refusal of a phase that cannot fit, said in seconds instead of after the build.

Model states are the weights, the gradients and the optimizer's state (fp32 master values and Adam's two
moments); activations, the ZeRO buckets and the allocator's slack come on top, so the figures are a lower bound
of what a phase needs. Per rank, with N parameters in the model, T of them trainable in the phase, W ranks, and
p bytes a value in the engine's precision (2 for bf16 and fp16, 4 for fp32), DeepSpeed 0.19 holds:

- weights: p N at ZeRO 0-2 (every rank the whole model, frozen parameters too), p N / W at ZeRO-3;
- gradients: p T at ZeRO 0-1 (ZeRO-1 reduces them at the end of the step's last backward, so all of them are there
  then), p T / W at ZeRO 2-3; at ZeRO-1 in bf16 with ``data_types.grad_accum_dtype`` fp32, the fp32
  accumulators of DeepSpeed's BF16 optimizer, 4 T;
- fp32 master values: 4 T / W at ZeRO 1-3 (a partition, also where the engine computes in fp32: DeepSpeed clones
  it), 4 T at ZeRO-0 in bf16 or fp16, none at ZeRO-0 in fp32 (the weights are the master values);
- Adam's moments: 8 T / W at ZeRO 1-3, 8 T at ZeRO-0.

``offload_optimizer`` moves the master values and the moments to the host (its ``ratio`` of them), where the step
runs on an fp32 partition of the gradients (4 T / W), and at ZeRO 2-3 takes the gradients off the accelerator;
``offload_param`` (ZeRO-3) moves the weights; ``nvme`` puts the moved values on disk instead. DeepSpeed's own
estimate (``estimate_zero2_model_states_mem_needs``) counts 2 N + 18 N / W at ZeRO-2 in bf16, every parameter
trainable: the same sum plus the transient fp32 gradient partition of the step (4 T / W), which this plan leaves
out so that it stays a lower bound.

A phase whose states alone exceed what a rank has (a GPU's memory; on a CPU, the node's memory, or its cgroup's
limit, shared by the node's ranks) cannot train: ``memory_problem`` says why, and the trainer refuses it before the
first engine is built (``guard.memory_check``); rank 0's log gives every phase's figures at the start.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from xpt_ds.config.engine_json import precision, zero_stage

GIB = float(1 << 30)
SHOWN = {"weights": "weights", "gradients": "gradients", "master": "fp32 master", "adam": "Adam moments"}  # parts


@dataclass(frozen=True)
class PhaseStates:
    """Bytes a rank holds for one phase's model states: ``parts`` on the accelerator, ``host`` offloaded."""
    name: str
    params: int
    trainable: int
    parts: dict[str, float]  # SHOWN's keys -> bytes on the device
    host: float  # bytes offloaded to host memory (offload_optimizer, offload_param with device cpu)

    @property
    def device(self) -> float:
        return sum(self.parts.values())

    def breakdown(self) -> str:
        return " + ".join(f"{SHOWN[k]} {gib(v)}" for k, v in self.parts.items() if v) or "none on the accelerator"


def gib(n: float) -> str:
    """Bytes in GiB, one decimal (two below 1 GiB, where one would show 0.0)."""
    return f"{n / GIB:.2f}" if n < GIB else f"{n / GIB:.1f}"


def phase_states(name: str, params: int, trainable: int, ds: dict, world: int) -> PhaseStates:
    """A phase's model states per rank under engine JSON ``ds`` on ``world`` ranks (the module docstring's sums)."""
    stage, dtype = zero_stage(ds), precision(ds)
    p = 4 if dtype == "fp32" else 2
    zero = ds.get("zero_optimization") or {}
    shard = world if stage >= 1 else 1
    weights = p * params / (world if stage == 3 else 1)
    if stage == 1 and dtype == "bf16" and _grad_accum(ds) == "fp32":  # DeepSpeed's BF16_Optimizer
        gradients = 4.0 * trainable
    else:
        gradients = p * trainable / (world if stage >= 2 else 1)
    master = 0.0 if stage == 0 and dtype == "fp32" else 4.0 * trainable / shard
    adam = 8.0 * trainable / shard
    host = 0.0
    optimizer_to = (zero.get("offload_optimizer") or {}).get("device", "none") if stage >= 1 else "none"
    if optimizer_to in ("cpu", "nvme"):  # the step runs on the host, on fp32 gradient partitions held there
        moved = float((zero.get("offload_optimizer") or {}).get("ratio", 1.0))
        host += (4.0 * trainable / shard + (master + adam if optimizer_to == "cpu" else 0.0)) * moved
        master, adam = master * (1 - moved), adam * (1 - moved)
        if stage >= 2:  # reduced partitions go to the host as the backward makes them
            gradients *= 1 - moved
    params_to = (zero.get("offload_param") or {}).get("device", "none") if stage == 3 else "none"
    if params_to in ("cpu", "nvme"):
        host += weights if params_to == "cpu" else 0.0
        weights = 0.0
    return PhaseStates(name, params, trainable, dict(zip(SHOWN, (weights, gradients, master, adam))), host)


def _grad_accum(ds: dict) -> str:
    """The dtype DeepSpeed accumulates gradients in: ``data_types.grad_accum_dtype``, else the engine's own."""
    given = str((ds.get("data_types") or {}).get("grad_accum_dtype") or precision(ds)).lower()
    return {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}.get(given, given)


def plan_phases(names: list[str], sizes: dict[str, int], trainables: list[set[str]], ds: dict,
                world: int) -> list[PhaseStates]:
    """Every phase's states; ``sizes``: parameter name -> element count, ``trainables``: each phase's names."""
    total = sum(sizes.values())
    return [phase_states(name, total, sum(sizes[n] for n in trained), ds, world)
            for name, trained in zip(names, trainables)]


def node_memory(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int:
    """This node's memory in bytes, or the lowest memory limit of this process's cgroup and its parents where that
    is less (a container; a Slurm job's ``--mem`` through its cgroup): ``memory.max`` in cgroup v2,
    ``memory.limit_in_bytes`` in v1."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min([total, *_cgroup_limits(proc_cgroup, Path(root))])


def _cgroup_limits(proc_cgroup: str, root: Path) -> list[int]:
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2
            folder, name = root, "memory.max"
        elif "memory" in controllers.split(","):  # v1
            folder, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        own = folder / path.lstrip("/")
        for level in [own, *own.parents]:
            if level != folder and folder not in level.parents:
                break
            try:
                text = (level / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit():
                limits.append(int(text))
    return limits


@dataclass(frozen=True)
class Capacity:
    """What one rank has: ``device`` bytes of its accelerator's memory (on a CPU, its share of the node's) and its
    share of the node's ``host`` memory, for what is offloaded; ``device_where`` and ``host_where`` say so in a
    line."""
    device: float
    host: float
    device_where: str
    host_where: str
    on_host: bool  # the accelerator is the CPU: the device's share and the host's are the same memory


def capacity(device: torch.device, ranks_on_node: int) -> Capacity:
    node = node_memory()
    share = node / max(ranks_on_node, 1)
    each = f", {share / GIB:.1f} GiB for each of its {ranks_on_node} ranks" if ranks_on_node > 1 else ""
    host_where = f"this node has {node / GIB:.1f} GiB of memory{each}"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return Capacity(float(props.total_memory), share, f"{props.name} ({device}) has "
                        f"{props.total_memory / GIB:.1f} GiB", host_where, on_host=False)
    return Capacity(share, share, host_where, host_where, on_host=True)


def plan_line(phases: list[PhaseStates], ds: dict, world: int, cap: Capacity | None) -> str:
    """Rank 0's start-up line: each phase's states a rank, and what a rank has (``cap``; None: not said)."""
    shown = [f"'{s.name}' {gib(s.device)} GiB ({s.breakdown()}; {s.trainable:,} of {s.params:,} parameters "
             f"trained)" + (f", {gib(s.host)} GiB offloaded to the host" if s.host else "") for s in phases]
    where = "" if cap is None else f"; {cap.device_where}" if cap.on_host or not any(s.host for s in phases) else \
        f"; {cap.device_where}; {cap.host_where}"
    return (f"memory plan, model states a rank before activations (ZeRO-{zero_stage(ds)}, {precision(ds)}, "
            f"{world} rank(s)): {'; '.join(shown)}{where}")


def too_big(s: PhaseStates, cap: Capacity) -> tuple[str, str] | None:
    """(what phase ``s`` needs, what a rank has) where it cannot fit in ``cap``; None where it can."""
    if cap.on_host and s.device + s.host > cap.device:
        return f"{(s.device + s.host) / GIB:.1f} GiB a rank", cap.device_where
    if not cap.on_host and s.device > cap.device:
        return f"{s.device / GIB:.1f} GiB a rank on its accelerator", cap.device_where
    if not cap.on_host and s.host > cap.host:
        return f"{s.host / GIB:.1f} GiB a rank of host memory for what it offloads", cap.host_where
    return None


def memory_problem(phases: list[PhaseStates], ds: dict, world: int, cap: Capacity) -> str | None:
    """The line naming the first phase whose model states alone do not fit a rank, with what they come to at ZeRO-3
    over all ranks and how many ranks of this size that takes; None when every phase fits."""
    for s in phases:
        found = too_big(s, cap)
        if found is None:
            continue
        need, has = found
        zero3 = phase_states(s.name, s.params, s.trainable, {**ds, "zero_optimization": {"stage": 3}}, 1).device
        ranks = math.ceil(zero3 / cap.device)
        ways = ["ZeRO-3 on more ranks"] + (["bf16"] if precision(ds) == "fp32" else []) + \
            ([] if s.host else ["the optimizer offloaded"])
        offloaded = f" + offloaded to the host {s.host / GIB:.1f}" if s.host else ""
        return (
            f"phase '{s.name}' needs at least {need} for its model states alone ({s.breakdown()}{offloaded} GiB; "
            f"ZeRO-{zero_stage(ds)}, {precision(ds)}, {world} rank(s); {s.trainable:,} of {s.params:,} parameters "
            f"trained), and {has}: it cannot train; at ZeRO-3 they come to {zero3 / GIB:.1f} GiB over all ranks, "
            f"at least {ranks} rank(s) of {cap.device / GIB:.1f} GiB: use {', '.join(ways)} (config key "
            "'deepspeed'), or train fewer parameters in that phase "
            "(guard.memory_check: false trains anyway)")
    return None


def whole_sizes(hf_config) -> dict[str, int]:
    """Parameter name -> element count of the model ``hf_config`` describes (a skeleton on the meta device)."""
    from xpt_ds.model.skeleton import skeleton
    return {name: math.prod(p.shape) for name, p in skeleton(hf_config).named_parameters()}


def config_plan_lines(cfg, worlds: list[int]) -> list[str]:
    """The plan's line of run config ``cfg`` for each world size, without a process group or a GPU: each phase's
    trainable parameters from the build plan's tags (the source's config.json and safetensors headers, no
    weights), the engine from ``cfg.deepspeed``."""
    from xpt_ds.model.build import build_plan
    from xpt_ds.model.phases import build_phase_trainables
    from xpt_ds.model.preflight import plan_target
    from xpt_ds.training.engine import load_ds_config
    ds = load_ds_config(cfg.deepspeed)
    tok, tcfg = plan_target(cfg)
    plan = build_plan(cfg.model, tok, cfg.data, rows=False)
    plan.close()
    trainables, sizes, names = build_phase_trainables(cfg, plan.tags), whole_sizes(tcfg), [p.name for p in cfg.phases]
    return [plan_line(plan_phases(names, sizes, trainables, ds, world), ds, world, None) for world in worlds]
