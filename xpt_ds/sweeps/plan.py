"""A sweep's plan, checked before the first run starts: every (method, size) run's config and command, the
``--set`` overrides that apply to it, its step count, and the evaluation and fine-tuning arguments."""
from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from xpt_ds.config import ConfigError, load_config, read_config_file
from xpt_ds.config.methods import METHODS, Method
from xpt_ds.finetuning.config import FinetuneConfig
from xpt_ds.sweeps.report import parse_size, size_label

SET_BY_SWEEP = ("run_dir", "model.method", "data.train_tokens")
# trust_remote_code: the sweep fine-tunes only its own exports, whose code (if any) is xpt-ds's own.
FINETUNE_SET_BY_SWEEP = ("model", "out", "trust_remote_code")


def method_config(base: dict, method: str) -> dict:
    """The base config for ``method``. The base's phases stay as written when they suit the method; otherwise
    the method's preset schedule (``Method.schedule``) is written over the base's total steps:

    - a graph method (trelm: ``Method.graph``) on a base whose phases are no phase graph, or a graph written for
      another method's graph, gets its graph: each phase's schedule (steps, lr, warmup, decay) from the base
      phase at the same index when the counts match, else the total steps split by the graph's shares and the
      first phase's lr, decay and (at most the phase's steps) warmup;
    - a method without a graph on a phase graph written for a graph method, or whose phases leave trainable
      to the presets, gets its presets the same way;
    - a one-phase method (xpt_sp, adapters, scratch) on a multi-phase base whose phases use the presets gets one
      phase: the first phase's schedule with the total steps, as launch/configs/roberta_base_xpt.yaml describes.

    Every method trains the same number of (global) steps. The English and parallel data keys go when no phase
    of the method reads them (a non-trelm method on a TreLM base)."""
    cfg = copy.deepcopy(base)
    phases = cfg.get("phases") or []
    m, base_m = METHODS[method], METHODS.get((cfg.get("model") or {}).get("method") or "xpt")
    graph = any(p.get("start_from") or p.get("merge") for p in phases)
    written_for_graph = graph and base_m is not None and bool(base_m.graph)
    if m.graph and (not graph or (written_for_graph and base_m.graph != m.graph)):
        cfg["phases"] = preset_phases(m, phases)
    elif not m.graph and graph and (written_for_graph or not any(p.get("trainable") for p in phases)):
        cfg["phases"] = preset_phases(m, phases)
    elif m.phases == 1 < len(phases) and not any(p.get("trainable") for p in phases):
        cfg["phases"] = [{**phases[0], "steps": sum(int(p.get("steps", 0)) for p in phases)}]
    _drop_unread_data(cfg, m)
    cfg.setdefault("model", {})["method"] = method
    return cfg


def preset_phases(m: Method, base: list[dict]) -> list[dict]:
    """``m.schedule`` as config phases over the base phases' total steps (``method_config``)."""
    schedule, total = m.schedule, sum(int(p.get("steps", 0)) for p in base)
    same = len(base) == len(schedule)
    out, left = [], total
    for i, preset in enumerate(schedule):
        src = base[i] if same else (base[0] if base else {})
        steps = int(src.get("steps", 0)) if same else left if i == len(schedule) - 1 else round(preset.share * total)
        left -= steps
        phase = {**preset.as_config(), "steps": steps}
        phase.update({k: src[k] for k in ("lr", "decay", "min_lr_ratio") if k in src})
        phase["warmup_steps"] = min(int(src.get("warmup_steps", 0)), steps)
        out.append(phase)
    return out


def _drop_unread_data(cfg: dict, m: Method) -> None:
    """data.source_shards / parallel_shards / parallel_valid_shards that no phase's objectives read (written for
    another method): left in, the trainer's checks would refuse them."""
    data, phases = cfg.get("data") or {}, cfg.get("phases") or []
    if m.trelm and not all(p.get("objectives") for p in phases):
        return  # a phase on the default objectives reads the parallel shards
    listed = {o for p in phases for o in p.get("objectives") or []}
    reads = {"source_shards": "mlm_source" in listed, "parallel_shards": bool(listed & {"cdlm_en_x", "cdlm_x_en"})}
    reads["parallel_valid_shards"] = reads["parallel_shards"]
    for key, read in reads.items():
        if not read or not m.trelm:
            data.pop(key, None)


def config_path(out: Path, method: str) -> Path:
    return out / "configs" / f"{method}.yaml"


@dataclass
class Plan:
    """Everything every run needs, checked before the first one starts. Dicts are keyed by method."""
    out: Path
    methods: list[str]
    sizes: list[int]
    nproc: int
    test_shards: list[str]
    evaluate_args: list[str]
    finetune_args: list[str] | None  # None: no downstream evaluation
    overrides: list[Override]
    steps: dict[tuple[str, int], int]  # total optimizer steps of (method, size)
    seq_len: dict[tuple[str, int], int]
    config_sha: dict[str, str]  # the hash of DIR/configs/METHOD.yaml, to notice a changed config on a rerun

    def run_dir(self, method: str, size: int) -> Path:
        return self.out / "runs" / method / size_label(size)

    def config_path(self, method: str) -> Path:
        return config_path(self.out, method)

    def train_args(self, method: str, size: int) -> list[str]:
        return ["--config", str(self.config_path(method)), f"--run_dir={self.run_dir(method, size)}",
                f"--model.method={method}", f"--data.train_tokens={size}",
                *(o.arg for o in self.overrides if o.applies(method, size))]

    def train_command(self, method: str, size: int) -> list[str]:
        args = self.train_args(method, size)
        if self.nproc == 1:
            return [sys.executable, "-m", "xpt_ds.train", *args]
        return [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(self.nproc),
                "--master_port", str(_free_port()), "--module", "xpt_ds.train", *args]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Override:
    """``--set [METHOD:][SIZE|LO..HI:]key=value``: a train config override for every run, one method's, the runs
    of one size or of a size range (inclusive; 002 Table A1 changes batch, lr and steps between such brackets)."""
    arg: str  # --key=value
    method: str | None = None
    lo: int = 0
    hi: int | None = None

    def applies(self, method: str, size: int) -> bool:
        return self.method in (None, method) and self.lo <= size and (self.hi is None or size <= self.hi)


def parse_override(item: str) -> Override:
    head, eq, value = item.partition("=")
    *qualifiers, key = head.split(":")
    if not eq or not key:
        raise ConfigError(f"--set '{item}' must look like [METHOD:][SIZE|LO..HI:]key=value")
    if key in SET_BY_SWEEP:
        raise ConfigError(f"--set '{item}': the sweep sets {', '.join(SET_BY_SWEEP)} itself")
    method, sizes = None, None
    for q in qualifiers:
        if q in METHODS and method is None:
            method = q
        elif sizes is None:
            try:
                sizes = _size_range(q)
            except ValueError:
                raise ConfigError(f"--set '{item}': '{q}' is neither a method ({', '.join(METHODS)}) nor a size or "
                                  "size range like 100K, 100K..400K or 800K..") from None
        else:
            raise ConfigError(f"--set '{item}': give at most one method and one size or size range")
    lo, hi = sizes or (0, None)
    return Override(f"--{key}={value}", method, lo, hi)


def _size_range(text: str) -> tuple[int, int | None]:
    """'100K' -> (100000, 100000); '100K..400K' -> (100000, 400000); '800K..' -> (800000, None); '..400K'."""
    first, dots, last = text.partition("..")
    if not dots:
        return parse_size(first), parse_size(first)
    return (parse_size(first) if first else 0), (parse_size(last) if last else None)


def build_plan(a: argparse.Namespace) -> Plan:
    """Parse sizes, write each method's config, and load it with every override (the trainer's own checks)."""
    sizes = sorted({parse_size(s) for s in a.sizes})
    unknown = [m for m in a.methods if m not in METHODS]
    if unknown:
        raise ConfigError(f"--methods: unknown {', '.join(unknown)}; valid: {', '.join(METHODS)}")
    methods = list(dict.fromkeys(a.methods))
    base = read_config_file(a.config)
    overrides = [parse_override(item) for item in a.set]
    finetune_args = _finetune_args(a)
    (a.out / "configs").mkdir(parents=True, exist_ok=True)
    steps, seq_len, sha, test_shards = {}, {}, {}, list(a.test_shards)
    for m in methods:
        text = yaml.safe_dump(method_config(base, m), sort_keys=False)
        config_path(a.out, m).write_text(text)
        sha[m] = hashlib.sha256(text.encode()).hexdigest()[:16]
        for size in sizes:
            args = [f"--model.method={m}", f"--data.train_tokens={size}",
                    *(o.arg for o in overrides if o.applies(m, size))]
            cfg = load_config(str(config_path(a.out, m)), args)
            steps[m, size], seq_len[m, size] = sum(p.steps for p in cfg.phases), cfg.data.seq_len
            test_shards = test_shards or list(cfg.data.valid_shards)
    if not test_shards:
        raise ConfigError("no test shards: give --test-shards or set data.valid_shards in the base config")
    return Plan(a.out, methods, sizes, a.nproc, test_shards,
                ["--batch-size", str(a.eval_batch_size), "--max-batches", str(a.eval_max_batches)], finetune_args,
                overrides, steps, seq_len, sha)


def _finetune_args(a: argparse.Namespace) -> list[str] | None:
    given = {f.name: getattr(a, "finetune_" + f.name) for f in dataclasses.fields(FinetuneConfig)
             if f.name not in FINETUNE_SET_BY_SWEEP and hasattr(a, "finetune_" + f.name)}
    if not given:
        return None
    if not given.get("train") or not given.get("test"):
        raise ConfigError("downstream evaluation needs both --finetune-train and --finetune-test")
    args = []
    for name, value in given.items():
        args += ["--" + name.replace("_", "-"), *map(str, value if isinstance(value, list) else [value])]
    return args
