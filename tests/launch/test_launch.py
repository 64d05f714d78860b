"""The launch/ scripts, run for real on loopback: two "nodes" (torchrun --nnodes 2, one process each) form
one 2-rank job and train to the end.

(That a CPU job leaves no DeepSpeed all-reduce buffer in /dev/shm is checked after every test, for every job it
started, by ``conftest.no_shm_left``; the 2-rank deepspeed-launcher run this file had for it was dropped.)"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import LONG_STEPS, REPO, base_config, free_port, long_config, read_metrics, write_config
from launch_builders import two_nodes
from xpt_ds.checkpoint.tags import tag_for

pytestmark = pytest.mark.multiproc


def test_two_node_torchrun_job_on_loopback(tmp_path, tiny_roberta, corpus):
    cfg = write_config(tmp_path / "cfg.yaml", base_config(tmp_path / "run", tiny_roberta, corpus))
    codes, outs = two_nodes(tmp_path, cfg)
    assert codes == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    marker = json.loads((tmp_path / "run/checkpoints/global_step000000008/COMPLETE").read_text())
    assert marker == {"global_step": 8, "world_size": 2, "zero_stage": 2}
    assert "phase 'phase2' starts at global step 4" in outs[0]


def test_a_torchrun_node_whose_master_never_starts_says_what_it_waits_for_and_gives_up(tmp_path):
    """torchrun prints nothing while a node waits for the rendezvous (600 s by default): the script says where it
    waits and for how long, and RDZV_TIMEOUT bounds it."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "NNODES": "2", "NODE_RANK": "1", "NPROC_PER_NODE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "CONFIG": str(REPO / "launch/configs/demo.yaml"),
           "RDZV_TIMEOUT": "3"}
    t0 = time.time()
    proc = subprocess.run(["bash", str(REPO / "launch/multi_node.sh")], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and time.time() - t0 < 60, proc.stderr[-2000:]
    assert (f"multi_node.sh: node 1 of 2 waits up to 3s for the rendezvous at 127.0.0.1:{env['MASTER_PORT']}"
            in proc.stderr), proc.stderr[-2000:]
    assert "timed out" in proc.stderr.lower(), proc.stderr[-2000:]
    bad = subprocess.run(["bash", str(REPO / "launch/multi_node.sh")], env={**env, "RDZV_TIMEOUT": "soon"},
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1] == \
        "multi_node.sh: RDZV_TIMEOUT must be a positive number of seconds, got 'soon'", bad.stderr


def _start_launch(tmp_path, tiny_roberta, corpus, script: str = "single_node") -> tuple[Path, subprocess.Popen]:
    """launch/single_node.sh with 2 ranks (the deepspeed launcher) on a long run (config tmp_path/c.yaml, output
    in tmp_path/job.log), in a process group of its own: (run directory, the script's process). ``multi_node``:
    launch/multi_node.sh as one torchrun node of 2 ranks instead."""
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", long_config(run, tiny_roberta, corpus, every=0))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "NUM_GPUS": "2", "OMP_NUM_THREADS": "1", "CONFIG": str(cfg),
           "MASTER_PORT": str(free_port())}
    if script == "multi_node":
        env.update(NNODES="1", NODE_RANK="0", NPROC_PER_NODE="2", MASTER_ADDR="127.0.0.1")
    with open(tmp_path / "job.log", "w") as log:
        return run, subprocess.Popen(["bash", str(REPO / f"launch/{script}.sh")], env=env, cwd=tmp_path,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _launched(tmp_path, tiny_roberta, corpus, script: str = "single_node"):
    """``_start_launch``, once the run has trained a few steps."""
    run, proc = _start_launch(tmp_path, tiny_roberta, corpus, script)
    deadline = time.time() + 300
    while not (run / "metrics.jsonl").exists() or max(read_metrics(run), default=0) < 3:
        assert proc.poll() is None and time.time() < deadline, (tmp_path / "job.log").read_text()[-3000:]
        time.sleep(0.05)
    return run, proc


def _left(config: Path, timeout: float = 1.0) -> str:
    """The job's processes (launcher, ranks) still running after waiting up to ``timeout`` s for them to go."""
    deadline = time.time() + timeout
    while True:
        left = subprocess.run(["pgrep", "-af", f"xpt_ds.cli.train.*{config}"], capture_output=True, text=True).stdout
        if not left or time.time() > deadline:
            return left
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["TERM to single_node.sh alone", "INT to single_node.sh's process group",
                                 "KILL to multi_node.sh (torchrun) alone"])
def test_a_launch_script_passes_a_stop_signal_to_its_ranks_once(tmp_path, tiny_roberta, corpus, how):
    """The deepspeed runner dies of a SIGTERM on one node and leaves its ranks training (a container's PID 1, or
    `kill PID`): single_node.sh passes the signal on, so the job checkpoints and exits 124 with nothing left
    running. A Ctrl-C (INT to the whole foreground group) reaches the ranks once: a checkpoint and 130, not the
    second Ctrl-C's stop without one. A `kill -9` of a launch script left the ranks training (under torchrun as
    under the deepspeed launcher): both now exec xpt_ds.runtime.launch_guard, and the ranks stop as for a
    SIGTERM, with a checkpoint."""
    script = "multi_node" if "multi_node" in how else "single_node"
    run, proc = _launched(tmp_path, tiny_roberta, corpus, script)
    sig, state, want = {"TERM": (signal.SIGTERM, "preempted", 124), "INT ": (signal.SIGINT, "interrupted", 130),
                        "KILL": (signal.SIGKILL, "preempted", -signal.SIGKILL)}[how[:4]]
    (os.killpg if how.endswith("group") else os.kill)(proc.pid, sig)
    code = proc.wait(timeout=300)
    left = _left(tmp_path / "c.yaml", timeout=300 if sig == signal.SIGKILL else 1)  # killed: they checkpoint on
    out = (tmp_path / "job.log").read_text()
    status = json.loads((run / "status.json").read_text())
    assert code == want and status["state"] == state, (code, status, out[-3000:])
    assert status["last_complete_checkpoint"] == tag_for(status["global_step"])
    assert status["global_step"] < 2 * LONG_STEPS
    assert left == "", f"processes still running: {left}"


def test_single_node_stops_on_a_ctrl_c_before_its_ranks_are_up(tmp_path, tiny_roberta, corpus):
    """A script's background job starts with SIGINT ignored; the ranks inherited that, so a Ctrl-C during the
    imports, the rendezvous and the model build did nothing until the trainer's own handler was in place. A Ctrl-C
    that comes before the launcher has started any rank stops the job at once: nothing trains."""
    run, script = _start_launch(tmp_path, tiny_roberta, corpus)
    time.sleep(0.5)  # the launcher is starting: no rank yet
    os.killpg(script.pid, signal.SIGINT)
    code = script.wait(timeout=300)
    out = (tmp_path / "job.log").read_text()
    assert code != 0 and not (run / "metrics.jsonl").exists(), (code, out[-3000:])
    left = _left(tmp_path / "c.yaml")
    assert left == "", f"processes still running: {left}"


@pytest.mark.parametrize("hostfile,num_gpus,error", [
    ("localhost slots=0\n", "", "bad hostfile line in HOSTS: 'localhost slots=0' (expected 'HOST slots=N', N >= 1)"),
    ("a slots=2\nb slots=1\na slots=2\n", "", "hostfile HOSTS lists a twice (one line per host)"),
    ("a slots=2\nb slots=1\n", "2", "NUM_GPUS=2 but a host in HOSTS has only slots=1"),
    ("# nothing\n", "", "hostfile HOSTS lists no hosts"),
    ("a slots=2\nb slots=3\n", "2", None),
])
def test_multi_node_checks_its_hostfile_before_launching(tmp_path, hostfile, num_gpus, error):
    """A hostfile DeepSpeed would start no rank from (slots=0, a run that 'succeeds' with world size 0), reject with a
    traceback (a host twice) or oversubscribe (NUM_GPUS over a host's slots) is one line from the script."""
    hosts = tmp_path / "hosts"
    hosts.write_text(hostfile)
    env = {**os.environ, "DRY_RUN": "1", "HOSTFILE": str(hosts), "NUM_GPUS": num_gpus,
           "CONFIG": str(REPO / "launch/configs/demo.yaml")}
    done = subprocess.run(["bash", str(REPO / "launch/multi_node.sh")], env=env, capture_output=True, text=True)
    if error is None:
        assert done.returncode == 0 and "--hostfile" in done.stderr, done.stderr
    else:
        assert (done.returncode, done.stderr) == (2, f"multi_node.sh: {error.replace('HOSTS', str(hosts))}\n")


def test_single_node_names_a_master_port_in_use(tmp_path):
    """A port something listens on already was a DistNetworkError traceback from every rank."""
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "DRY_RUN": "1", "DS_ACCELERATOR": "cpu", "MASTER_PORT": str(port),
               "CONFIG": str(REPO / "launch/configs/demo.yaml")}
        done = subprocess.run(["bash", str(REPO / "launch/single_node.sh")], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (
        2, f"single_node.sh: MASTER_PORT={port} is in use on this machine; pick another or leave it unset\n")
