"""launch/single_node.sh (and lib.sh's count_devices, which launch/multi_node.sh shares) with CUDA_VISIBLE_DEVICES
that the deepspeed launcher cannot keep: UUIDs or MIG ids (it passed --num_gpus N, and the launcher gave the ranks
CUDA_VISIBLE_DEVICES=0..N-1, another job's GPUs on a shared node), or a value that hides every GPU (nvidia-smi then
counted all of them). Dry runs, with a stand-in nvidia-smi that lists 4 GPUs."""
import os
import subprocess

import pytest

from conftest import REPO, free_port

UUIDS = "GPU-5c3b0f2a,GPU-9e1d7c44"


def _dry_run(tmp_path, script: str, cuda_visible_devices: str | None, **extra) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n3\\n'\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "CUDA_VISIBLE_DEVICES", "NUM_GPUS")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", DRY_RUN="1", MASTER_PORT=str(free_port()),
               CONFIG=str(REPO / "launch/configs/demo.yaml"), **extra)
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    return subprocess.run(["bash", str(REPO / f"launch/{script}.sh")], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("value", [UUIDS, "MIG-8e1f0c2d-3b4a-5c6d-7e8f-9a0b1c2d3e4f", "0,GPU-9e1d7c44"])
def test_single_node_refuses_devices_named_otherwise_than_by_index(tmp_path, value):
    done = _dry_run(tmp_path, "single_node", value)
    assert done.returncode == 2, done.stderr  # was a dry run of `--num_gpus N`: the ranks on GPUs 0..N-1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"single_node.sh: CUDA_VISIBLE_DEVICES='{value}' is not a list of GPU indices"), line
    assert "CUDA_VISIBLE_DEVICES=2,3" in line and "launch/multi_node.sh" in line


@pytest.mark.parametrize("script", ["single_node", "multi_node"])
@pytest.mark.parametrize("value", ["", "NoDevFiles"])
def test_a_value_that_hides_every_gpu_is_refused(tmp_path, script, value):
    """Empty (every GPU hidden) was counted by nvidia-smi: the job ran on all 4; NoDevFiles (Slurm's) as 1 GPU."""
    extra = {"NNODES": "1", "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1"} if script == "multi_node" else {}
    done = _dry_run(tmp_path, script, value, **extra)
    assert (done.returncode, done.stderr) == (2, f"{script}.sh: CUDA_VISIBLE_DEVICES='{value}' hides every GPU: "
                                                 "unset it to use all of them, list GPU indices (e.g. "
                                                 "CUDA_VISIBLE_DEVICES=0,1), or set DS_ACCELERATOR=cpu to train on "
                                                 "CPU processes\n")


def test_what_the_launchers_can_keep_is_unchanged(tmp_path):
    """Indices keep the selection (--include); unset counts nvidia-smi's GPUs; DS_ACCELERATOR=cpu ignores the value;
    torchrun (multi_node.sh) keeps UUIDs as they are, one process each."""
    picked = _dry_run(tmp_path, "single_node", "2,3")
    assert picked.returncode == 0 and "--include localhost:2\\,3 " in picked.stderr, picked.stderr
    every = _dry_run(tmp_path, "single_node", None)
    assert every.returncode == 0 and "--num_gpus 4 " in every.stderr, every.stderr
    cpu = _dry_run(tmp_path, "single_node", "", DS_ACCELERATOR="cpu")
    assert cpu.returncode == 0 and "--num_gpus 1 " in cpu.stderr, cpu.stderr
    torchrun = _dry_run(tmp_path, "multi_node", UUIDS, NNODES="1", NODE_RANK="0", MASTER_ADDR="127.0.0.1")
    assert torchrun.returncode == 0 and "--nproc_per_node 2 " in torchrun.stderr, torchrun.stderr
