"""The launch/ scripts, run for real on loopback: two "nodes" (torchrun --nnodes 2, one process each) form
one 2-rank job and train to the end."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, base_config, free_port, write_config

pytestmark = pytest.mark.multiproc


def test_two_node_torchrun_job_on_loopback(tmp_path, tiny_roberta, corpus):
    cfg = write_config(tmp_path / "cfg.yaml", base_config(tmp_path / "run", tiny_roberta, corpus))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "NNODES": "2", "NPROC_PER_NODE": "1", "OMP_NUM_THREADS": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "CONFIG": str(cfg)}
    nodes = [subprocess.Popen(["bash", str(REPO / "launch/multi_node.sh")], env={**env, "NODE_RANK": str(r)},
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = [n.communicate(timeout=600)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    marker = json.loads((tmp_path / "run/checkpoints/global_step000000008/COMPLETE").read_text())
    assert marker == {"global_step": 8, "world_size": 2, "zero_stage": 2}
    assert "phase 'phase2' starts at global step 4" in outs[0]


def test_a_cpu_job_leaves_no_shared_memory_behind(tmp_path, tiny_roberta, corpus):
    """DeepSpeed's CPU all-reduce maps one 64 MiB /dev/shm file per rank, named after MASTER_ADDR, MASTER_PORT and
    the rank, and never unlinks it: without xpt_ds.training.engine.unlink_shm_names every CPU run (and test)
    leaves them in RAM-backed /dev/shm until the machine runs out of memory."""
    cfg = write_config(tmp_path / "cfg.yaml", base_config(tmp_path / "run", tiny_roberta, corpus))
    port = free_port()
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TORCHDYNAMO_DISABLE": "1"}
    # The deepspeed launcher (launch/single_node.sh) sets LOCAL_SIZE, which switches the shared-memory path on.
    out = subprocess.run(["python3", "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", str(port),
                          "--module", "xpt_ds.train", "--config", str(cfg), "--phases.0.steps=1", "--phases.1.steps=1"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    left = sorted(p.name for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"))
    assert left == []
