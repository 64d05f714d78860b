"""One job per run directory (xpt_ds.runtime.run_lock), and one config per job (run_lock.config_difference): a second
job on a live run's directory, or a node given other overrides, stops with one line and touches nothing."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import base_config, launch, long_config, read_metrics, start_main, write_config
from launch_builders import two_nodes
from xpt_ds.runtime.run_lock import config_difference

pytestmark = pytest.mark.multiproc


def test_a_second_job_on_a_live_run_directory_stops_and_the_first_loses_nothing(tmp_path, tiny_roberta, corpus):
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", long_config(run, tiny_roberta, corpus, every=0, steps=20))
    first = start_main("xpt_ds.cli.train", ["--config", str(cfg)], tmp_path / "first.log")
    deadline = time.time() + 300
    while not (run / "metrics.jsonl").exists() or max(read_metrics(run), default=0) < 2:
        assert first.poll() is None and time.time() < deadline, (tmp_path / "first.log").read_text()[-3000:]
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGSTOP)  # it stays alive, and holds the lock, however long the second takes
    try:
        second = launch(["--config", str(cfg)])
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    assert second.returncode == 2, second.stderr[-3000:]
    line = second.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: run directory {run} is in use by xpt-ds train (pid {first.pid} on "), line
    assert "Traceback" not in second.stderr
    assert json.loads((run / "status.json").read_text())["state"] in ("running", "finished")  # the first's
    assert first.wait(timeout=600) == 0, (tmp_path / "first.log").read_text()[-3000:]
    assert sorted(read_metrics(run)) == list(range(1, 41))  # every step's row: nothing of the first run lost
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    again = launch(["--config", str(cfg)])  # the lock went with the first process: the run can be resumed
    assert again.returncode == 0 and "resumed from" in again.stderr, again.stderr[-3000:]


def test_nodes_given_different_overrides_stop_before_anything_is_written(tmp_path, tiny_roberta, corpus):
    cfg = write_config(tmp_path / "cfg.yaml", base_config(tmp_path / "run", tiny_roberta, corpus))
    codes, outs = two_nodes(tmp_path, cfg, ([], ["--optim.micro_batch_size=4"]))
    assert all(code != 0 for code in codes), outs
    want = ("error: rank 1's config differs from rank 0's (optim.micro_batch_size: 2 vs 4): every node must be given "
            "the same config and overrides")
    assert all(want in out for out in outs), outs[0][-2000:] + outs[1][-2000:]
    assert not (tmp_path / "run").exists()  # a fresh run: the directory the lock made is gone again


def test_config_difference_names_the_rank_and_keys():
    a = {"optim": {"lr": 1.0, "betas": [0.9, 0.99]}, "phases": [{"name": "p1", "steps": 2}], "seed": 0}
    assert config_difference([a, a, a]) is None
    b = {**a, "phases": [{"name": "p1", "steps": 3}], "seed": 1}
    assert config_difference([a, a, b]) == ("rank 2's config differs from rank 0's (phases.0.steps: 2 vs 3; seed: 0 "
                                            "vs 1): every node must be given the same config and overrides")


def test_a_job_refused_by_the_lock_never_removes_the_directory_it_found_locked(tmp_path, monkeypatch):
    """Two jobs started together on a new run_dir both see it missing ('fresh'); the one that loses the lock must
    leave the winner's directory (only .run.lock in it yet) alone, where it removed it before."""
    import deepspeed
    import torch.distributed as dist

    from xpt_ds.config import load_config
    from xpt_ds.runtime.run_lock import claim_run
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from xpt_ds.runtime.run_lock import hold; f = hold(Path(sys.argv[1])); "
                               "print('held', flush=True); time.sleep(60)", str(run)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        cfg_path = tmp_path / "c.yaml"
        cfg_path.write_text(f"run_dir: {run}\nmodel: {{source: s, tokenizer: t.model}}\n"
                            "phases: [{name: p, steps: 1, lr: 0.1}]\ndata: {train_shards: [a.tar]}\n")
        monkeypatch.setattr(deepspeed.comm, "get_rank", lambda: 0)
        monkeypatch.setattr(dist, "get_world_size", lambda: 1)
        lock, problem = claim_run(load_config(str(cfg_path), []), fresh=True)
        assert lock is None and problem.startswith(f"run directory {run} is in use by xpt-ds train (pid {holder.pid}")
        assert (run / ".run.lock").exists()  # the winner's directory and lock file are still there
    finally:
        holder.kill()
        holder.wait()
