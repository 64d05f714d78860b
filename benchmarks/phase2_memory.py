"""Where a phase-2 step's host memory peaks on CPU: a Qwen2.5-0.5B-shaped source (394,890,880 parameters, random
bf16 weights written by ``bench_build.write_random``), ``method: xpt``, phase 1 (2 steps, ``@new``) then phase 2
(3 steps, every parameter), ``optim.torch_adam``, one process, a checkpoint every step. Prints, for every line
the trainer logs, the job's largest Pss_Anon (``job_watch``, every 0.2 s) since the line before.

    python benchmarks/phase2_memory.py --out /tmp/p2 --data CORPUS [--deepspeed ds_configs/zero1_fp32.json]

CORPUS: a prepared corpus (manifest.json with a train split, spm.model), e.g. ``xpt-data prepare`` of UA-GEC's
text (``python -m data_tools.cli.uagec``). A phase-2 checkpoint of this shape takes about 6 GB; keep_last 1.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import yaml
from transformers import Qwen2Config

from bench_build import write_random  # this folder's
from build_report import GIB
from job_watch import REPO, log_times, peaks, run_job

QWEN25_05B = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768,
                  rope_theta=1e6, dtype="bfloat16")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--deepspeed", type=Path, default=REPO / "ds_configs/zero1_fp32.json")
    a = ap.parse_args()
    source = write_random(a.out / "qwen2.5-0.5b", Qwen2Config(**QWEN25_05B))
    run = a.out / "run"
    shutil.rmtree(run, ignore_errors=True)
    cfg = {"run_dir": str(run), "deepspeed": str(a.deepspeed.resolve()),
           "model": {"source": str(source), "tokenizer": str(a.data / "spm.model"), "method": "xpt"},
           "phases": [{"name": "phase1", "steps": 2, "lr": 1e-4}, {"name": "phase2", "steps": 3, "lr": 1e-5}],
           "data": {"train_shards": [f"{a.data}/manifest.json:train"], "seq_len": 256, "num_workers": 0},
           "optim": {"micro_batch_size": 1, "grad_accum": 1, "torch_adam": True},
           "checkpoint": {"every_steps": 1, "keep_last": 1},
           "logging": {"log_every": 1, "eval_every": 0, "progress_bar": False, "tensorboard": False}}
    (a.out / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    r = run_job([sys.executable, "-m", "xpt_ds.cli.train", "--config", str(a.out / "cfg.yaml")], env,
                a.out / "train.log", cap=int(21 * GIB), timeout=1800)
    print(f"rc {r['rc']}, the job's peak Pss_Anon {peaks(r['samples'])['job_anon_gib']:.2f} GiB")
    before = r["started"]
    for t, line in [*log_times(a.out / "train.log"), (r["ended"], "(end)")]:
        peak = peaks(r["samples"], before, t)["job_anon_gib"]
        print(f"{t - r['started']:7.1f} s  peak since the line before {peak:6.2f} GiB | {line[:100]}")
        before = t
    shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    main()
