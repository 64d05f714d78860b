"""One job per run directory (xpt_ds.runtime.run_lock), and one config per job (run_lock.config_difference): a second
job on a live run's directory, or a node given other overrides, stops with one line and touches nothing."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import base_config, launch, long_config, read_metrics, start_main, write_config
from launch_builders import two_nodes
from xpt_ds.runtime import run_lock
from xpt_ds.runtime.run_lock import RunInUse, config_difference, hold

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


# A job that takes the lock, forks a process that shares the lock file (as a rank forks its DataLoader workers), and
# ends at once: the child lives on for argv[2] seconds, holding the lock.
ENDS_BEFORE_ITS_FORK = """import os, sys, time
from pathlib import Path
from xpt_ds.runtime.run_lock import hold
lock = hold(Path(sys.argv[1]))
child = os.fork()
if child == 0:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1), os.dup2(null, 2)
    time.sleep(float(sys.argv[2]))
    os._exit(0)
print(os.getpid(), child, flush=True)
os._exit(0)
"""


def _ended_job(run, child_s: float) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", ENDS_BEFORE_ITS_FORK, str(run), str(child_s)], capture_output=True,
                         text=True, check=True, timeout=120)
    job, child = map(int, out.stdout.split())
    return job, child


def test_a_lock_that_an_ended_jobs_forks_still_hold_is_waited_for_and_else_names_them(tmp_path, monkeypatch,
                                                                                      caplog):
    """A rank killed with ``kill -9`` left its DataLoader workers holding the run directory's lock for up to 5 s,
    and a job started meanwhile (a requeue, the command run again, the test suite's next launch) was refused, the
    line naming the dead rank as the holder. The holder's forks are waited for now, and named if they outlive
    the wait."""
    run = tmp_path / "run"
    job, child = _ended_job(run, 2.0)
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="xpt_ds.runtime.run_lock"):
        lock = hold(run)
    assert lock is not None and time.monotonic() - started < run_lock.ENDED_HOLDER_WAIT_S
    assert f"(pid {job} on {socket.gethostname()}, since " in caplog.text
    assert "has ended, and processes it forked still hold its lock; waiting up to 30 s" in caplog.text
    assert f"(pid {os.getpid()} on " in (run / ".run.lock").read_text()  # the lock is this process's now
    lock.close()
    monkeypatch.setattr(run_lock, "ENDED_HOLDER_WAIT_S", 0.5)
    job, child = _ended_job(run, 120.0)
    try:
        with pytest.raises(RunInUse) as said:
            hold(run)
    finally:
        os.kill(child, signal.SIGKILL)
    line = str(said.value)
    assert line.startswith(f"run directory {run} is in use by processes that xpt-ds train (pid {job} on "), line
    assert line.endswith(f"forked (pid(s) {child}), still alive 0.5 s after it ended: one job writes a run "
                         "directory at a time (stop that one first, or give this one another run_dir)"), line
