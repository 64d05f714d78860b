"""``python -m xpt_ds.sweep --config BASE --methods xpt scratch ... --sizes 100K 400K 1.6M --out DIR``

Post-trains each method on a ladder of training-data sizes (``data.train_tokens``: nested subsets of the
corpus) with the same number of steps for every size, as 002 §5.1 does (less data = more epochs), then scores
every run with ``xpt_ds.evaluate`` and, given fine-tuning files, ``xpt_ds.export`` + ``xpt_ds.finetune``.
Training and fine-tuning are child processes (``--nproc`` > 1: the deepspeed launcher); evaluation and export
run in this process, with each command's output in the run's log.
Writes ``DIR/results.jsonl`` (one row per finished run), ``DIR/results.md``, ``DIR/plot_<metric>.png``,
TensorBoard scalars under ``DIR/tb`` and ``DIR/summary.json`` with the data-efficiency ratio (how much data
Scratch needs to match each method; ``xpt_ds.sweep_report``). A run whose row is in ``results.jsonl`` is not
run again; a failed one is reported with its log and the sweep goes on.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import hashlib
import importlib
import json
import shlex
import shutil
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from xpt_ds.config import ConfigError, load_config, read_config_file
from xpt_ds.files import os_error_line
from xpt_ds.finetune import FinetuneConfig, cli_type
from xpt_ds.methods import METHODS
from xpt_ds.sweep_report import parse_size, size_label, write_report

SET_BY_SWEEP = ("run_dir", "model.method", "data.train_tokens")
# trust_remote_code: the sweep fine-tunes only its own exports, whose code (if any) is xpt-ds's own.
FINETUNE_SET_BY_SWEEP = ("model", "out", "trust_remote_code")
INTRINSIC_KEYS = ("loss", "ppl", "hits@1", "hits@3", "hits@5", "hits@10", "mrr", "mr")


class StepFailed(Exception):
    def __init__(self, stage: str, code: int, log: Path):
        super().__init__(f"{stage} exited {code}; log: {log}")
        self.stage, self.code, self.log = stage, code, log


def method_config(base: dict, method: str) -> dict:
    """The base config for ``method``. A one-phase method (xpt_sp, adapters, scratch) on a multi-phase base
    whose phases use the presets gets one phase: the first phase's schedule with the total steps, as
    launch/configs/roberta_base_xpt.yaml describes, so every method trains the same number of steps."""
    cfg = copy.deepcopy(base)
    phases = cfg.get("phases") or []
    if METHODS[method].phases == 1 < len(phases) and not any(p.get("trainable") for p in phases):
        cfg["phases"] = [{**phases[0], "steps": sum(int(p.get("steps", 0)) for p in phases)}]
    cfg.setdefault("model", {})["method"] = method
    return cfg


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


def _run(cmd: list[str], log: Path, stage: str) -> float:
    """Run one stage as a process, appending its output to ``log``; its wall seconds, or StepFailed."""
    started = time.time()
    with open(log, "a") as f:
        f.write(f"$ {shlex.join(cmd)}\n")
        f.flush()
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise StepFailed(stage, code, log)
    return time.time() - started


def _call(module: str, argv: list[str], log: Path, stage: str) -> float:
    """Run ``python -m MODULE ARGV`` in this process (saves a start-up of torch, transformers and DeepSpeed per
    run), appending its output to ``log``; its wall seconds, or StepFailed."""
    started = time.time()
    entry = importlib.import_module(module).main  # outside the redirect: loggers made at import keep sys.stdout
    with open(log, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print(f"$ python -m {module} {shlex.join(argv)}", flush=True)
        try:
            code = entry(argv)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
        except Exception:  # one broken run must not end the sweep
            traceback.print_exc()
            code = 1
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # the next run's training processes need the memory
    if code:
        raise StepFailed(stage, code, log)
    return time.time() - started


def _status(run_dir: Path) -> dict:
    path = run_dir / "status.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _add_seconds(run_dir: Path, stage: str, seconds: float) -> None:
    """Per-stage wall seconds, summed over sweep invocations (an interrupted run resumes and adds)."""
    path = run_dir / "sweep_seconds.json"
    times = json.loads(path.read_text()) if path.is_file() else {}
    times[stage] = times.get(stage, 0.0) + seconds
    path.write_text(json.dumps(times) + "\n")


def train(plan: Plan, method: str, size: int) -> None:
    run_dir = plan.run_dir(method, size)
    if _status(run_dir).get("state") == "finished":
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    _add_seconds(run_dir, "train", _run(plan.train_command(method, size), run_dir / "train.log", "train"))


def intrinsic(plan: Plan, run_dir: Path) -> dict:
    out = run_dir / "eval.json"
    argv = ["--run", str(run_dir), "--shards", *plan.test_shards, *plan.evaluate_args, "--out", str(out)]
    _add_seconds(run_dir, "evaluate", _call("xpt_ds.evaluate", argv, run_dir / "evaluate.log", "evaluate"))
    result = json.loads(out.read_text())
    return {**{k: result[k] for k in INTRINSIC_KEYS}, "eval_tokens": result["tokens"]}


def downstream(plan: Plan, run_dir: Path) -> dict:
    """Export, fine-tune on every seed, and the headline metric's mean ± std (kept if already there)."""
    results = run_dir / "finetune" / "results.json"
    if not results.is_file():
        export = run_dir / "export"
        shutil.rmtree(export, ignore_errors=True)
        log = run_dir / "finetune.log"
        seconds = _call("xpt_ds.export", ["--run", str(run_dir), "--out", str(export)], log, "export")
        seconds += _run([sys.executable, "-m", "xpt_ds.finetune", "--model", str(export), "--out",
                         str(results.parent), *plan.finetune_args], log, "finetune")
        _add_seconds(run_dir, "finetune", seconds)
    r = json.loads(results.read_text())
    metric = r["config"]["metric"]
    row = {"downstream_metric": metric, "downstream_mean": r["summary"][metric]["mean"],
           "downstream_std": r["summary"][metric]["std"], "downstream_seeds": len(r["seeds"])}
    if "majority_baseline" in r:
        row["majority_accuracy"] = r["majority_baseline"]["accuracy"]
    return row


def run_one(plan: Plan, method: str, size: int) -> dict:
    """Train, evaluate and (optionally) fine-tune one (method, size); its results.jsonl row."""
    run_dir = plan.run_dir(method, size)
    train(plan, method, size)
    row = {"method": method, "size": size, "size_label": size_label(size), "steps": plan.steps[method, size]}
    tokens_seen, seq_len = _status(run_dir).get("tokens_seen", 0), plan.seq_len[method, size]
    row["epochs"] = tokens_seen * (seq_len - 2) / seq_len / size  # a packed sequence is cls + body + sep
    row.update(intrinsic(plan, run_dir))
    if plan.finetune_args is not None:
        row.update(downstream(plan, run_dir))
    seconds = json.loads((run_dir / "sweep_seconds.json").read_text())
    row.update(train_seconds=round(seconds.get("train", 0.0), 1), wall_seconds=round(sum(seconds.values()), 1),
               nproc=plan.nproc, run_dir=str(run_dir), train_args=shlex.join(plan.train_args(method, size)),
               config_sha256=plan.config_sha[method])
    return row


def read_rows(path: Path) -> dict[tuple[str, int], dict]:
    rows = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                rows[(r["method"], r["size"])] = r
    return rows


def sweep(plan: Plan) -> list[dict]:
    """Every (size, method) not yet in results.jsonl, smallest size first; the failures."""
    results = plan.out / "results.jsonl"
    done, failures = read_rows(results), []
    for size in plan.sizes:
        for method in plan.methods:
            label = f"{method} {size_label(size)}"
            if (method, size) in done:
                print(f"skip {label}: its row is in {results}", flush=True)
                old = done[(method, size)]
                if (old.get("train_args"), old.get("config_sha256")) != (shlex.join(plan.train_args(method, size)),
                                                                         plan.config_sha[method]):
                    print(f"warning: {label} in {results} was trained with another config or arguments "
                          f"({old.get('train_args')}); delete its row and run directory to run it again", flush=True)
                continue
            print(f"run {label}: {plan.steps[method, size]} steps on {size:,} tokens -> {plan.run_dir(method, size)}",
                  flush=True)
            try:
                row = run_one(plan, method, size)
            except StepFailed as e:
                print(f"FAILED {label}: {e}", flush=True)
                failures.append({"method": method, "size": size, "stage": e.stage, "exit": e.code, "log": str(e.log)})
                continue
            with open(results, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"done {label}: ppl {row['ppl']:.2f}, mrr {row['mrr']:.4f} in {row['wall_seconds']:.0f} s",
                  flush=True)
    return failures


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m xpt_ds.sweep", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="base run config (YAML/JSON), e.g. a two-phase xpt config")
    p.add_argument("--methods", nargs="+", required=True, metavar="METHOD", help=f"of {', '.join(METHODS)}")
    p.add_argument("--sizes", nargs="+", required=True, metavar="SIZE",
                   help="training tokens per run (data.train_tokens): 100K 400K 1.6M or integers")
    p.add_argument("--out", required=True, type=Path, help="sweep directory (results, plots, runs/METHOD/SIZE)")
    p.add_argument("--nproc", type=int, default=1, help="ranks per run: 1 = one process, else the deepspeed launcher")
    p.add_argument("--test-shards", nargs="+", default=[], metavar="SPEC",
                   help="held-out shards for xpt_ds.evaluate (default: the base config's data.valid_shards)")
    p.add_argument("--eval-batch-size", type=int, default=16, help="xpt_ds.evaluate --batch-size")
    p.add_argument("--eval-max-batches", type=int, default=0, help="xpt_ds.evaluate --max-batches (0 = all)")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="[METHOD:][SIZES:]KEY=VALUE",
                   help="train config override for every run (e.g. optim.micro_batch_size=16), only METHOD's "
                        "(e.g. scratch:phases.0.lr=5e-4), only one size's or a size range's, inclusive (e.g. "
                        "800K..:optim.grad_accum=8, xpt:100K..400K:phases.0.lr=1e-4)")
    ft = p.add_argument_group("downstream (xpt_ds.finetune on each run's export; needs --finetune-train and "
                              "--finetune-test)")
    for f in dataclasses.fields(FinetuneConfig):
        if f.name in FINETUNE_SET_BY_SWEEP:
            continue
        ft.add_argument("--finetune-" + f.name.replace("_", "-"), dest="finetune_" + f.name,
                        default=argparse.SUPPRESS, help=f.metadata["help"], **cli_type(f))
    a = p.parse_args(argv)
    if a.nproc < 1:
        p.error("--nproc must be >= 1")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        plan = build_plan(a)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 2
    failures = sweep(plan)
    rows = list(read_rows(plan.out / "results.jsonl").values())
    write_report(plan.out, rows, failures)
    print(f"wrote {plan.out / 'results.md'}, {plan.out / 'summary.json'}, plots and {plan.out / 'tb'}")
    for f in failures:
        print(f"failed: {f['method']} {size_label(f['size'])} ({f['stage']} exited {f['exit']}); log: {f['log']}",
              file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
