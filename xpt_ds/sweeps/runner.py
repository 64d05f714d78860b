"""Running a sweep's plan: each (method, size) is trained (a child process, through the deepspeed launcher when
``--nproc`` > 1), scored with ``xpt_ds.evaluate`` and, given fine-tuning files, exported and fine-tuned; one row
per finished run goes to ``results.jsonl``. A run whose row is there is not run again; a failed one is recorded
with its log and the sweep goes on."""
from __future__ import annotations

import contextlib
import importlib
import json
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from xpt_ds.sweeps.plan import Plan
from xpt_ds.sweeps.report import size_label

INTRINSIC_KEYS = ("loss", "ppl", "hits@1", "hits@3", "hits@5", "hits@10", "mrr", "mr")


class StepFailed(Exception):
    def __init__(self, stage: str, code: int, log: Path):
        super().__init__(f"{stage} exited {code}; log: {log}")
        self.stage, self.code, self.log = stage, code, log


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
    status, seq_len = _status(run_dir), plan.seq_len[method, size]
    tokens_seen = status.get("target_tokens_seen", status.get("tokens_seen", 0))  # target MLM rows (TreLM has more)
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
