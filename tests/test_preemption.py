"""Preemption through the real deepspeed launcher: SIGUSR1 to one rank checkpoints every rank and exits 124;
the same command resumes and ends exactly where an uninterrupted run ends."""
import json
import os
import signal
import time

import pytest
import torch

from conftest import base_config, launch, rank_pids, read_metrics, start, write_config
from xpt_ds.training.checkpoint import complete_tags
from xpt_ds.training.export import load_checkpoint_fp32

pytestmark = pytest.mark.multiproc


def _cfg(run_dir, tiny_roberta, corpus):
    cfg = base_config(run_dir, tiny_roberta, corpus, checkpoint={"every_steps": 20, "keep_last": 2})
    cfg["phases"] = [{"name": "phase1", "steps": 30, "lr": 1e-3, "warmup_steps": 1},
                     {"name": "phase2", "steps": 30, "lr": 5e-4, "warmup_steps": 1}]
    cfg["logging"]["log_every"] = 1
    return cfg


def test_sigusr1_checkpoints_exits_124_and_resumes_exactly(tmp_path, tiny_roberta, corpus):
    straight = tmp_path / "straight"
    proc = launch(["--config", str(write_config(tmp_path / "s.yaml", _cfg(straight, tiny_roberta, corpus)))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]

    run = tmp_path / "preempted"
    cfg_path = write_config(tmp_path / "p.yaml", _cfg(run, tiny_roberta, corpus))
    launcher = start(["--config", str(cfg_path)], tmp_path / "preempted.log")
    deadline = time.time() + 300
    while not (run / "metrics.jsonl").exists() or max(read_metrics(run), default=0) < 6:
        assert launcher.poll() is None and time.time() < deadline, "run ended before it could be preempted"
        time.sleep(0.05)
    os.kill(rank_pids(launcher)[1], signal.SIGUSR1)  # one rank only: the ranks must agree by themselves
    launcher.wait(timeout=300)
    out = (tmp_path / "preempted.log").read_text()
    assert launcher.returncode == 124, (launcher.returncode, out[-1500:])
    assert "preempted: checkpoint global_step" in out
    status = json.loads((run / "status.json").read_text())
    stopped = status["global_step"]
    assert status["state"] == "preempted" and 6 <= stopped < 60
    assert status["last_complete_checkpoint"] == complete_tags(run / "checkpoints")[-1] == f"global_step{stopped:09d}"

    proc = launch(["--config", str(cfg_path)], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want, got = read_metrics(straight), read_metrics(run)
    assert all(got[s]["train/loss"] == want[s]["train/loss"] for s in range(1, 61))
    tags = complete_tags(run / "checkpoints")
    assert tags == complete_tags(straight / "checkpoints") == ["global_step000000040", "global_step000000060"]
    a, b = (load_checkpoint_fp32(r / "checkpoints", tags[-1]) for r in (straight, run))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
