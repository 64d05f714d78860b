"""Frozen means frozen: xpt phase 1 on ZeRO-2 with 2 ranks through torchrun (``conftest.engine_runs``: the plain bf16
run is test_lean_engine's too)."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForMaskedLM

from conftest import REPO, free_port, launch, read_frozen
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.model.forward.objective import strip_prefix

pytestmark = pytest.mark.multiproc


@pytest.mark.parametrize("ds", ["zero2_fp32", "zero2_bf16"])
def test_phase1_leaves_source_untouched(ds, engine_runs, tiny_roberta):
    tag_dir = engine_runs(ds) / "checkpoints" / tag_for(4)  # the end of phase 1 (xpt preset: @new trains)
    states = torch.load(tag_dir / "mp_rank_00_model_states.pt", map_location="cpu", weights_only=False)
    module = strip_prefix(states["module"])  # what the engine held, in its compute dtype

    src = AutoModelForMaskedLM.from_pretrained(tiny_roberta).state_dict()
    reused = {f"roberta.encoder.layer.{i + 1}.{k[len(f'roberta.encoder.layer.{i}.'):]}": k
              for k in src for i in range(2) if k.startswith(f"roberta.encoder.layer.{i}.")}
    reused |= {k: k for k in src if k.startswith(("roberta.embeddings.position", "roberta.embeddings.token_type",
                                                  "roberta.embeddings.LayerNorm", "lm_head.dense", "lm_head.layer_norm"))}
    dtype = module["roberta.encoder.layer.0.attention.self.query.weight"].dtype  # ITL_in: trainable
    assert dtype == (torch.bfloat16 if "bf16" in ds else torch.float32)
    assert not set(module) & set(reused)  # the module states leave the frozen weights to frozen_fp32.safetensors
    frozen = read_frozen(tag_dir)
    assert {strip_prefix({k: 0}).popitem()[0] for k in frozen} == set(reused)
    assert all(torch.equal(strip_prefix(frozen)[t], src[s]) for t, s in reused.items())  # exact fp32, even under bf16
    assert not torch.equal(module["roberta.encoder.layer.0.attention.self.query.weight"].float(),
                           strip_prefix(frozen)["roberta.encoder.layer.1.attention.self.query.weight"])

    # Optimizer state exists only for trainable parameters: count it across both ranks' partitions.
    trainable = sum(shape.numel() for group in states["param_shapes"] for shape in group.values())
    frozen_count = sum(v.numel() for v in frozen.values())
    held = 0
    for rank in range(2):
        prefix = "bf16_" if "bf16" in ds else ""
        opt = torch.load(tag_dir / f"{prefix}zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", weights_only=False)
        osd = opt["optimizer_state_dict"]
        held += sum(t.numel() for t in osd["single_partition_of_fp32_groups"])
        exp_avg = sum(s["exp_avg"].numel() for s in osd["base_optimizer_state"]["state"].values())
        assert exp_avg == sum(t.numel() for t in osd["single_partition_of_fp32_groups"])
    padding = 2 * len(states["param_shapes"])  # ZeRO pads each group to a multiple of the world size
    assert trainable <= held <= trainable + padding
    assert not states.get("frozen_param_shapes")
    assert trainable + frozen_count == sum(p.numel() for p in AutoModelForMaskedLM.from_pretrained(tiny_roberta).parameters()) \
        + 2 * sum(v.numel() for k, v in src.items() if k.startswith("roberta.encoder.layer.0.")) \
        + (200 - 120) * (64 + 1)


def _inode(run, step):
    return (run / "checkpoints" / tag_for(step) / "frozen_fp32.safetensors").stat().st_ino


def test_a_phase_writes_its_frozen_weights_once_and_links_them(straight_runs, tmp_path, tiny_roberta, corpus):
    """The frozen weights do not change within a phase: the checkpoints of a phase share one
    frozen_fp32.safetensors (hard links), a new phase writes its own, and a resumed run links the file of the
    checkpoint it resumed from. Every linked file still holds what a save of its own would (the run resumed from them
    trains the same bits: test_reproducible, test_crash_save)."""
    straight = straight_runs(2)
    run = straight / "run"  # a checkpoint every step; phase 1 is steps 1-4 (its end saved before the switch)
    assert len({_inode(run, s) for s in range(1, 5)}) == 1 and len({_inode(run, s) for s in range(5, 9)}) == 1
    assert _inode(run, 4) != _inode(run, 5)
    phase1 = read_frozen(run / "checkpoints" / tag_for(1))
    assert phase1 and read_frozen(run / "checkpoints" / tag_for(5)) == {}

    resumed = tmp_path / "run"
    shutil.copytree(run, resumed)  # separate files: a copy shares no inode
    for step in range(3, 9):
        shutil.rmtree(resumed / "checkpoints" / tag_for(step))
    proc = launch(["--config", str(straight / "cfg.yaml"), f"--run_dir={resumed}"], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # an fp32 engine's own copy of each frozen value is exact: nothing is kept beside it
    assert f"{len(phase1)} frozen parameters ({len(phase1)} exact in the engine's own copy, 0 fp32 values kept " \
        "beside it on rank 0)" in proc.stderr, proc.stderr[-3000:]
    assert len({_inode(resumed, s) for s in (2, 3, 4)}) == 1 and _inode(resumed, 1) != _inode(resumed, 2)
    for step in (3, 8):
        got = load_checkpoint_fp32(resumed / "checkpoints", tag_for(step))
        want = load_checkpoint_fp32(run / "checkpoints", tag_for(step))
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), step


@pytest.mark.parametrize("world", [2, 3])
def test_each_rank_keeps_a_slice_of_the_frozen_weights_and_gathers_them_exactly(world, tmp_path):
    """FrozenWeights under torchrun: each rank holds ceil(numel / world) values of each it copies (sizes that do not
    divide, a one-element value), keeps a bf16 engine copy that holds its value exactly as that copy (LOCAL, no copy)
    and one that rounds it as a slice, keeps ZeRO-3 partitions as the value where they hold it on every rank and as
    a slice on every rank where one rank's elements are no bf16 number, and every rank gets every whole value back
    bit for bit."""
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
                           "--master_port", str(free_port()), str(REPO / "tests/frozen_shards_probe.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    sizes = {"a.weight": 35, "b.bias": 3, "c.one": 1, "d.weight": 32}
    for r in rows:
        assert r["exact"] and r["held"] == {n: -(-k // world) for n, k in sizes.items()}, r
        assert r["kinds"] == {**{n: "slice" for n in sizes}, "e.exact": "local", "f.rounded": "slice",
                              "g.partitioned": "partition", "h.last_rank_rounds": "slice", "i.fp32": "partition"}, r
        assert r["copied"] == sum(-(-k // world) for k in sizes.values()) + -(-12 // world) + -(-13 // world), r
        assert r["shapes"] == {"a.weight": [7, 5], "b.bias": [3], "c.one": [1], "d.weight": [4, 4, 2]}
