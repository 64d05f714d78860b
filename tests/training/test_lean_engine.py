"""ds_configs/zero{1,2}_bf16_lean.json take out the host waits DeepSpeed 0.19.8 adds to a bf16 step (its
throughput timer, the gradient-overflow check, ZeRO-2's overlap_comm, ZeRO-1's gradient hooks): on an H200 they
gave 1.34x (ZeRO-2) and 1.52x (ZeRO-1) the tokens/s of zero2_bf16 in phase 2 (BENCHMARKS.md). They must change
where the step waits, not what it computes: two ranks train to the same losses and weights as the plain configs.
What they give up, the skip of a non-finite step, is tests/training/test_guards.py's."""
import pytest
import torch

from conftest import read_metrics
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import tag_for

pytestmark = pytest.mark.multiproc


@pytest.mark.parametrize("stage", [1, 2])
def test_lean_config_trains_as_the_plain_one(engine_runs, stage):
    plain, lean = engine_runs(f"zero{stage}_bf16"), engine_runs(f"zero{stage}_bf16_lean")
    losses = [{s: r["train/loss"] for s, r in read_metrics(run).items() if "train/loss" in r} for run in (plain, lean)]
    assert len(losses[0]) == 8 and losses[0] == losses[1]
    weights = [load_checkpoint_fp32(run / "checkpoints", tag_for(8)) for run in (plain, lean)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
