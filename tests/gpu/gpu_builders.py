"""What the GPU tests share (test_cuda, test_cuda_decoder, test_cuda_document_mask): where they run (``ON_CPU``:
``XPT_GPU_TESTS_ON_CPU=1`` rehearses them on the CPU), a training run's environment and config, its losses, and
the figures they write to ``$XPT_GPU_REPORT``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from conftest import REPO, base_config, read_metrics, write_config
from xpt_ds.runtime.op_builds import arch_list_problem

ON_CPU = os.environ.get("XPT_GPU_TESTS_ON_CPU") == "1"
ACCELERATOR = "cpu" if ON_CPU else "cuda"
STEPS = 5  # per phase
# CUBLAS_WORKSPACE_CONFIG: cuBLAS picks the same reduction order every call (CUDA's reproducibility notes).
ENV = {"DS_ACCELERATOR": ACCELERATOR, "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}


def _arch_list() -> dict:
    """The GPU image sets ``TORCH_CUDA_ARCH_LIST=9.0a``, which DeepSpeed's JIT build of FusedAdam cannot read (the
    trainer says so in one line, ``xpt_ds.runtime.op_builds``): the runs build it for this GPU's own capability,
    as ``benchmarks/gpu_session.sh`` does, so that ``pytest -m gpu tests/gpu`` also runs on its own."""
    if ON_CPU or arch_list_problem(os.environ.get("TORCH_CUDA_ARCH_LIST", "")) is None:
        return {}
    return {"TORCH_CUDA_ARCH_LIST": "%d.%d" % torch.cuda.get_device_capability()}


def gpu_env(compile: bool = False) -> dict:
    env = {**os.environ, **ENV, **_arch_list()}
    if compile:
        env.pop("TORCHDYNAMO_DISABLE", None)
    else:
        env["TORCHDYNAMO_DISABLE"] = "1"
    return env


def report(name: str, figures: dict) -> None:
    if os.environ.get("XPT_GPU_REPORT"):
        out = Path(os.environ["XPT_GPU_REPORT"])
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(figures, indent=1, default=str))


def train(root: Path, cfg: dict, compile: bool = False) -> subprocess.CompletedProcess:
    root.mkdir(parents=True, exist_ok=True)
    cfg_path = write_config(root / "cfg.yaml", cfg)
    proc = subprocess.run([sys.executable, "-m", "xpt_ds.cli.train", "--config", str(cfg_path)], cwd=REPO,
                          env=gpu_env(compile), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def gpu_config(root: Path, source: Path, corpus: Path, ds: str, **sections) -> dict:
    """Two phases of STEPS steps on the tiny model under ``ds``, with DeepSpeed FusedAdam (not torch AdamW)."""
    cfg = base_config(root / "run", source, corpus, deepspeed=str(REPO / f"ds_configs/{ds}.json"), **sections)
    cfg["phases"] = [{"name": "phase1", "steps": STEPS, "lr": 3e-3, "warmup_steps": 1},
                     {"name": "phase2", "steps": STEPS, "lr": 1e-3, "warmup_steps": 1}]
    cfg["optim"]["torch_adam"] = False
    cfg["data"]["num_workers"] = 0
    cfg["logging"]["tensorboard"] = False
    return cfg


def losses(run: Path) -> list[float]:
    rows = read_metrics(run)
    return [rows[s]["train/loss"] for s in sorted(rows) if "train/loss" in rows[s]]
