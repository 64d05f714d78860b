"""What the launcher tests share: ``two_nodes``, launch/multi_node.sh as two torchrun "nodes" on loopback
(test_launch, and the run-lock test of two nodes sharing a run directory)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import REPO, free_port


def two_nodes(tmp_path, cfg: Path, extras=((), ())) -> tuple[list[int], list[str]]:
    """launch/multi_node.sh as two torchrun "nodes" of one process each on loopback, node r given the overrides
    ``extras[r]``: (exit codes, outputs)."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "NNODES": "2", "NPROC_PER_NODE": "1", "OMP_NUM_THREADS": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "CONFIG": str(cfg)}
    nodes = [subprocess.Popen(["bash", str(REPO / "launch/multi_node.sh"), *extra], env={**env, "NODE_RANK": str(r)},
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r, extra in enumerate(extras)]
    outs = [n.communicate(timeout=600)[0] for n in nodes]
    return [n.returncode for n in nodes], outs
