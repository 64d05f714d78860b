"""The launch/ scripts, run for real on loopback: two "nodes" (torchrun --nnodes 2, one process each) form
one 2-rank job and train to the end.

(That a CPU job leaves no DeepSpeed all-reduce buffer in /dev/shm is checked after every test, for every job it
started, by ``conftest.no_shm_left``; the 2-rank deepspeed-launcher run this file had for it was dropped.)"""
import json
import os
import subprocess

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
