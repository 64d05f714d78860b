"""A run's status.json between attempts (xpt_ds.runtime.status): a mistyped --resume leaves a finished run as it
was; a run whose rank 0 was killed reads as 'died', not 'running', and the next job on it says it takes over."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, base_config, run_main, small_tmpfs, write_config
from xpt_ds.checkpoint.tags import MARKER, tag_for
from xpt_ds.runtime.status import describe, read_status, writer_identity


def _files(run: Path) -> dict:
    """Every file of ``run``: its bytes' digest and its modification time."""
    return {str(p.relative_to(run)): (hashlib.md5(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture
def finished(tmp_path, tiny_roberta, corpus) -> tuple[Path, Path]:
    """(run directory, config) of a run whose status.json says finished, with complete checkpoints at steps 1 and 2
    and the start of a save at step 3 that never completed (markers only: a bad --resume reads no more)."""
    run = tmp_path / "run"
    for step in (1, 2, 3):
        (run / "checkpoints" / tag_for(step)).mkdir(parents=True)
    for step in (1, 2):
        (run / "checkpoints" / tag_for(step) / MARKER).write_text(json.dumps({"global_step": step}))
    (run / "status.json").write_text(json.dumps({"updated": "2026-01-01T00:00:00+0000", "state": "finished",
                                                 "global_step": 2, "last_complete_checkpoint": tag_for(2)}))
    (run / ".run.lock").write_text("xpt-ds train (pid 1 on elsewhere, since 2026-01-01 00:00:00 UTC)\n")
    return run, write_config(tmp_path / "run.yaml", base_config(run, tiny_roberta, corpus))


@pytest.mark.parametrize("value, culprit", [
    ("latestt", "--resume 'latestt' is not a complete checkpoint of run {run}; valid: auto, none, or a complete "
                f"checkpoint: {tag_for(2)}, {tag_for(1)}"),
    (tag_for(9), f"--resume '{tag_for(9)}' is not a complete checkpoint of run {{run}}; valid:"),
    (tag_for(3), f"--resume '{tag_for(3)}' is not a complete checkpoint of run {{run}} (an incomplete save: no "
                 "COMPLETE marker); valid:"),
    ("best", "--resume best: run {run} records no best checkpoint"),
], ids=["typo", "missing_tag", "incomplete_tag", "best_without_one"])
def test_a_mistyped_resume_is_one_line_and_leaves_the_finished_run_as_it_was(finished, value, culprit):
    """It was 'failed' in status.json, its .run.lock rewritten, and the line named neither 'auto' nor 'none'."""
    run, cfg = finished
    before = _files(run)
    proc = run_main("xpt_ds.cli.train", ["--config", str(cfg), f"--resume={value}"], timeout=300)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert errors[0].startswith("error: " + culprit.format(run=run)), errors[0]
    assert ", none, " in errors[0] and tag_for(2) in errors[0]
    assert _files(run) == before  # status.json (still 'finished'), the lock file and every checkpoint untouched


def test_a_mistyped_resume_on_a_new_run_directory_makes_nothing(tmp_path, tiny_roberta, corpus):
    cfg = write_config(tmp_path / "run.yaml", base_config(tmp_path / "run", tiny_roberta, corpus))
    proc = run_main("xpt_ds.cli.train", ["--config", str(cfg), "--resume", "global_step3"], timeout=300)
    assert proc.returncode == 2 and "valid: auto, none (the run has no complete checkpoint)" in proc.stderr
    assert not (tmp_path / "run").exists()


# A stand-in for a trainer's rank 0 (no torch: it starts in a fraction of a second): it locks the run directory as
# run_lock.hold does, takes the run's status as the trainer does (StatusFile, a heartbeat every 0.2 s), says
# 'ready' and waits to be killed.
CHILD = """
import fcntl, sys, time
from pathlib import Path
from xpt_ds.runtime.status import StatusFile
run = Path(sys.argv[1])
lock = open(run / ".run.lock", "a+")
fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
status = StatusFile(run, every=0.2)
status.write(state="running", phase="phase1", global_step=3, total_steps=8,
             last_complete_checkpoint="global_step000000002")
print("ready", flush=True)
time.sleep(120)
"""


def _claim(run: Path, monkeypatch):
    import deepspeed
    import torch.distributed as dist

    from xpt_ds.config import load_config
    from xpt_ds.runtime.run_lock import claim_run
    cfg_path = run.parent / "c.yaml"
    cfg_path.write_text(f"run_dir: {run}\nmodel: {{source: s, tokenizer: t.model}}\n"
                        "phases: [{name: p, steps: 1, lr: 0.1}]\ndata: {train_shards: [a.tar]}\n")
    monkeypatch.setattr(deepspeed.comm, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 1)
    return claim_run(load_config(str(cfg_path), []), fresh=False)


def test_a_run_whose_rank_0_is_killed_reads_as_died_and_the_next_job_takes_over(tmp_path, monkeypatch, caplog):
    run = tmp_path / "run"
    run.mkdir()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(run)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        alive = read_status(run)
        assert alive["state"] == "running" and alive["writer"]["pid"] == child.pid, alive
        assert alive["writer"]["host"] == socket.gethostname() and alive["heartbeat_every_s"] == 0.2
        assert describe(alive).startswith(f"running (pid {child.pid} on {socket.gethostname()}, heartbeat ")
        first = alive["heartbeat"]
        deadline = time.time() + 10
        while read_status(run).get("heartbeat") == first:  # the heartbeat thread renews it (1 s resolution)
            assert time.time() < deadline, "no heartbeat"
            time.sleep(0.1)
        assert read_status(run)["updated"] == alive["updated"]  # the fields are the last write's
        lock, problem = _claim(run, monkeypatch)
        assert lock is None and problem.startswith(f"run directory {run} is in use"), problem

        os.kill(child.pid, signal.SIGKILL)  # as the OOM killer does; not reaped yet: a zombie
        deadline = time.time() + 10
        while read_status(run)["state"] == "running":
            assert time.time() < deadline, "a killed writer still reads as running"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    dead = read_status(run)
    assert dead["state"] == "died" and dead["recorded_state"] == "running", dead
    assert dead["died"] == f"no heartbeat since {dead['heartbeat']}: rank 0 (pid {child.pid} on " \
        f"{socket.gethostname()}) is gone"
    assert json.loads((run / "status.json").read_text())["state"] == "running"  # the file is as it was left
    shown = run_main("xpt_ds.cli.status", [str(run)])
    assert shown.returncode == 1 and shown.stdout.startswith(f"{run}: died (no heartbeat since "), shown
    assert "global step 3 of 8; last complete checkpoint global_step000000002" in shown.stdout

    with caplog.at_level(logging.WARNING, logger="xpt_ds.runtime.run_lock"):
        lock, problem = _claim(run, monkeypatch)  # the kernel dropped the dead job's lock
    try:
        assert problem is None and lock is not None
        said = [r.getMessage() for r in caplog.records]
        assert said == [f"the previous attempt on {run} died while running ({dead['died']}; its last complete "
                        "checkpoint: global_step000000002): this one takes over"], said
    finally:
        lock.close()


def test_liveness_from_the_writers_host_and_from_another(tmp_path):
    """On the writer's host its process is looked up (a pid now another process's is not the writer); from another
    host only the heartbeat's age tells, dead after 5 beats and at least 300 s. A file from before heartbeats (no
    writer) is taken at its word."""
    me = writer_identity()
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now - 200))

    def state(writer, heartbeat=stamp, **extra):
        (tmp_path / "status.json").write_text(json.dumps({"state": "running", "writer": writer,
                                                          "heartbeat": heartbeat, "heartbeat_every_s": 60.0,
                                                          **extra}))
        return read_status(tmp_path, now=now)

    assert state(me)["state"] == "running"  # this very process, however old its heartbeat
    assert state({**me, "proc_start": me["proc_start"] + 1})["state"] == "died"  # the pid came round again
    elsewhere = {**me, "host": "node-that-is-not-this-one"}
    assert state(elsewhere)["state"] == "running"  # 200 s: within 5 beats of 60 s (300 s)
    old = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now - 400))
    died = state(elsewhere, old)
    assert died["state"] == "died" and died["died"].startswith(f"no heartbeat since {old} (7 min; a live run "
                                                               "renews it every 60 s, taken as dead after 300 s)")
    assert state(elsewhere, old, heartbeat_every_s=600.0)["state"] == "running"  # 5 of its beats: 3000 s
    (tmp_path / "status.json").write_text(json.dumps({"state": "running", "updated": old, "global_step": 16}))
    assert read_status(tmp_path, now=now)["state"] == "running"
    # ... and said to be one: it printed "running; phase ..." for a run such a version left killed
    assert describe(read_status(tmp_path, now=now)).startswith(f"running, as an xpt-ds of before 2026-11-29 "
                                                               f"recorded it (last written {old}); phase 'None', "
                                                               "global step 16 of None;")
    assert describe(read_status(tmp_path, now=now)).endswith("whether it still runs cannot be told: if no job of "
                                                             "this run is running, the same command resumes it")


def test_a_run_directory_that_does_not_exist_is_an_error_not_a_run_yet_to_start(tmp_path, capsys):
    """A mistyped RUN_DIR printed "no status (the run has not started ...)" and exited 0; now its line says the
    directory is missing, the other runs are still read, and the exit is 2."""
    from xpt_ds.cli.status import main
    (tmp_path / "started").mkdir()
    assert main([str(tmp_path / "started"), str(tmp_path / "mistyped")]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{tmp_path / 'started'}: no status (the run has not started, or its status.json cannot be read)",
                   f"{tmp_path / 'mistyped'}: error: no such directory"]
    assert main(["--json", str(tmp_path / "mistyped")]) == 2
    assert json.loads(capsys.readouterr().out) == {"run_dir": str(tmp_path / "mistyped"), "error": "no such directory"}


def test_the_exit_status_is_the_worst_runs_and_a_run_that_never_stepped_says_so(tmp_path, capsys):
    """A failed or halted run exits 3 (they exited 0, as a finished one: a requeue script could not tell), a died
    one 1, a missing directory 2, whichever is worst. A run that failed before its first step printed "phase
    'None', global step None of None"; a folder of runs given for a run printed 'no status (the run has not
    started ...)'."""
    from xpt_ds.cli.status import main

    def run(name: str, **status) -> str:
        (tmp_path / name).mkdir()
        (tmp_path / name / "status.json").write_text(json.dumps(status))
        return str(tmp_path / name)

    done = run("done", state="finished", phase="p2", global_step=8, total_steps=8,
               last_complete_checkpoint="global_step000000008")
    failed = run("failed", state="failed", error="config key 'logging.tensorboard': cannot write ...")
    halted = run("halted", state="halted", phase="p1", global_step=3, total_steps=8, last_complete_checkpoint=None)
    assert main([done]) == 0
    capsys.readouterr()
    assert main([done, failed]) == 3
    assert capsys.readouterr().out.splitlines()[1] == f"{failed}: failed: config key 'logging.tensorboard': cannot " \
        "write ...; it stopped before its first step (no checkpoint)"
    assert main([halted]) == 3
    assert capsys.readouterr().out == f"{halted}: halted; phase 'p1', global step 3 of 8; last complete checkpoint " \
        "none\n"
    assert main([failed, str(tmp_path / "typo")]) == 2  # (the checkpoint read "None")
    capsys.readouterr()
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: no status: not a run directory, but 3 below it are (done, " \
        f"failed, halted): xpt-ds status {tmp_path}/*\n"


def test_a_status_file_the_trainer_did_not_write_is_an_error_and_a_file_for_a_run_is_named_as_one(tmp_path, capsys):
    """A garbled status.json read as a run yet to start, and {"state": 5} printed "5; it stopped ...", both exit 0:
    a requeue script took them for fine runs. A file given for RUN_DIR read "no such directory"."""
    from xpt_ds.cli.status import main
    cases = {"garbled": '{"state": "runn', "list": "[1]", "unknown": '{"state": 5}', "typo": '{"state": "finshed"}'}
    for name, text in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "status.json").write_text(text)
    assert main([str(tmp_path / name) for name in cases]) == 3
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": error: ")[0] for line in out] == [str(tmp_path / name) for name in cases]
    assert out[0].endswith("garbled/status.json is not JSON (Unterminated string starting at: line 1 column 11 "
                           "(char 10))")
    assert out[1].endswith("list/status.json holds a list, not a JSON object")
    assert out[2].endswith("unknown/status.json has state 5, none of running, preempted, interrupted, halted, "
                           "failed, finished")
    assert "has state 'finshed'" in out[3]
    (tmp_path / "a_file").write_text("")
    assert main(["--json", str(tmp_path / "a_file"), str(tmp_path / "typo")]) == 2
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == {"run_dir": str(tmp_path / "a_file"), "error": "not a directory"}
    assert rows[1]["error"].endswith("has state 'finshed', none of running, preempted, interrupted, halted, failed, "
                                     "finished")


def test_a_run_on_a_full_disk_still_says_it_failed(tmp_path):
    """The status is written beside status.json and renamed over it, which a full disk refuses: a run that failed
    because its disk filled up stayed 'running' until ``xpt-ds status`` called it dead. Now the last state is
    written over the blocks status.json holds. A real small filesystem (tmpfs), filled."""
    import errno
    import shutil
    from xpt_ds.runtime.status import StatusFile
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        status = StatusFile(disk, every=3600)
        status.write(state="running", phase="phase1", global_step=3)
        with open(disk / "filler", "wb") as f:
            with pytest.raises(OSError) as full:
                f.write(b"\0" * (2 << 20))
                f.flush()
        assert full.value.errno == errno.ENOSPC and shutil.disk_usage(disk).free < 4096
        status.write(state="failed", phase="phase1", global_step=3, error=f"{disk}/checkpoints: No space left")
        status.close()
        found = json.loads((disk / "status.json").read_text())
        assert (found["state"], found["error"]) == ("failed", f"{disk}/checkpoints: No space left")
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "status.json"]  # no file left beside it
