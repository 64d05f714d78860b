"""xpt_ds.runtime.op_builds.check_build_lock: torch's JIT loader waits forever on a build lock a killed build
left (a job killed while it built DeepSpeed's op on a fresh node); the run stops with one line naming the file
instead, and a lock of a build under way is waited for, with one line saying so.

The runs are real interpreters (their DeepSpeed has loaded no op yet) with their own extensions folder, a copy
of the one launch/install.sh built (copied with its times, so ninja finds it up to date and builds nothing)."""
import os
import shutil
import subprocess
import threading
import time

import pytest
from torch.utils import cpp_extension

from conftest import base_config, write_config
from processes import _command
from xpt_ds.runtime.op_builds import STALE_LOCK_S, lock_problem

OP = "deepspeed_shm_comm"  # the CPU accelerator's all-reduce op, loaded as every run joins its process group


def _age(folder, seconds):
    old = time.time() - seconds
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (old, old), follow_symlinks=False)


def test_a_lock_is_stale_only_when_it_and_its_folder_are_older_than_the_limit(tmp_path):
    lock = tmp_path / "fused_adam" / "lock"
    lock.parent.mkdir()
    lock.touch()
    (lock.parent / "fused_adam.o").touch()
    now = time.time()
    assert lock_problem(lock, "fused_adam", now) is None  # a build under way
    _age(lock.parent, STALE_LOCK_S + 60)
    line = lock_problem(lock, "fused_adam", time.time())
    assert line.startswith(f"{lock} is 11 min old and nothing beside it changed for 11 min: a build of DeepSpeed's "
                           "fused_adam op was killed mid-way") and "\n" not in line
    assert line.endswith(f"delete it (rm '{lock}') unless a process is building fused_adam now")
    (lock.parent / "build.ninja").touch()  # ninja still writing: the build goes on, however old its lock
    assert lock_problem(lock, "fused_adam", time.time()) is None
    lock.unlink()
    assert lock_problem(lock, "fused_adam") is None


@pytest.fixture
def extensions(tmp_path):
    """A copy of the built extensions folder's all-reduce op, in a folder of its own."""
    built = cpp_extension._get_build_directory(OP, verbose=False)
    if not os.path.exists(os.path.join(built, f"{OP}.so")):
        pytest.skip(f"{built} holds no built {OP} (bash launch/install.sh builds it)")
    root = tmp_path / "extensions"
    shutil.copytree(built, root / OP)
    return root


def _command_for(tmp_path, tiny_roberta, corpus, extensions):
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus,
                      phases=[{"name": "phase1", "steps": 1, "lr": 1e-3}, {"name": "phase2", "steps": 1, "lr": 1e-3}])
    cfg["logging"].update(tensorboard=False)
    return _command(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))], 1,
                    {"TORCH_EXTENSIONS_DIR": str(extensions)})


def test_a_stale_lock_stops_the_run_with_one_line_naming_it(tmp_path, tiny_roberta, corpus, extensions):
    lock = extensions / OP / "lock"
    lock.touch()
    _age(extensions, STALE_LOCK_S + 3600)
    cmd, env = _command_for(tmp_path, tiny_roberta, corpus, extensions)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)  # torch alone: waits forever
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {lock} is 70 min old and nothing beside it changed for 70 min: a build of "
                      f"DeepSpeed's {OP} op was killed mid-way (a preempted or killed job), and every run that loads "
                      f"the op would wait on it forever; delete it (rm '{lock}') unless a process is building {OP} "
                      "now"], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and lock.exists()  # the user decides; nothing is removed for them


def test_a_build_under_way_is_waited_for_and_said(tmp_path, tiny_roberta, corpus, extensions):
    """A fresh lock: the run says it waits, waits, and trains once the other process's build ends (the test
    removes the lock once the line is out, as that build's end would)."""
    lock = extensions / OP / "lock"
    lock.touch()
    cmd, env = _command_for(tmp_path, tiny_roberta, corpus, extensions)
    waiting = (f"waiting for {lock}: another process is building DeepSpeed's {OP} op (a first run with this "
               "extensions folder; it takes a minute or two)")
    log = tmp_path / "stderr.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            deadline = time.monotonic() + 240
            while waiting not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1.0)
            assert proc.poll() is None, log.read_text()[-3000:]  # still waiting on the lock
            lock.unlink()
            assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
        finally:
            proc.kill()
    lines = log.read_text().splitlines()
    assert lines.count(waiting) == 1 and any("saved checkpoint global_step000000002" in line for line in lines)


def test_a_lock_held_for_a_moment_is_waited_for_quietly(tmp_path, monkeypatch, capsys):
    """Every load takes the lock for a moment, built or not (torch's up-to-date check): ranks that start together
    see each other's. A lock gone within QUIET_WAIT_S is no build, and nothing is said."""
    from xpt_ds.runtime import op_builds
    lock = tmp_path / "fused_adam" / "lock"
    lock.parent.mkdir()
    lock.touch()
    monkeypatch.setattr(op_builds, "jit_lock", lambda name: (lock, "fused_adam"))  # the folder of this test
    release = threading.Timer(0.5, lock.unlink)
    release.start()
    started = time.monotonic()
    op_builds.check_build_lock("FusedAdamBuilder")
    release.join()
    assert capsys.readouterr().err == "" and time.monotonic() - started < op_builds.QUIET_WAIT_S
    lock.touch()  # held past QUIET_WAIT_S: a build, said once
    op_builds.check_build_lock("FusedAdamBuilder")
    assert capsys.readouterr().err.startswith(f"waiting for {lock}: another process is building")
