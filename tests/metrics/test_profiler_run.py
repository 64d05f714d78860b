"""``profile.*`` in a real run: ``engine_runs``'s runs profile on both ranks twice, the second profile across the
phase hand-over (``conftest.PROFILED``). Its zero2_fp32 run must train to the same losses and weights as
``straight_runs(2)``, the same run without profiling (checkpointing every step, which changes no value), and each
rank writes its trace and table."""
import gzip
import json

import pytest
import torch

from conftest import read_metrics
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.export.hf import load_checkpoint_fp32

pytestmark = pytest.mark.multiproc


def test_a_profiled_run_trains_to_the_same_bits_and_each_rank_writes_its_profiles(engine_runs, straight_runs):
    run, plain = engine_runs("zero2_fp32"), straight_runs(2) / "run"
    assert not (plain / "profile").exists()
    losses = [{s: r["train/loss"] for s, r in read_metrics(d).items() if "train/loss" in r} for d in (plain, run)]
    assert len(losses[0]) == 8 and losses[0] == losses[1]
    weights = [load_checkpoint_fp32(d / "checkpoints", tag_for(8)) for d in (plain, run)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])

    files = ["rank0.pt.trace.json.gz", "rank0.txt", "rank1.pt.trace.json.gz", "rank1.txt"]
    assert {d.name: sorted(f.name for f in d.iterdir()) for d in (run / "profile").iterdir()} == {
        "steps_2-3": files, "steps_5-6": files}
    events = json.load(gzip.open(run / "profile/steps_5-6/rank1.pt.trace.json.gz"))["traceEvents"]
    names = {e.get("name") for e in events}
    assert {"xpt.data", "xpt.forward", "xpt.backward", "xpt.optimizer", "xpt.phase_switch", "xpt.exchange"} <= names
    table = (run / "profile/steps_5-6/rank1.txt").read_text()
    assert "global steps 5-6 (2 recorded after 1 warmup), rank 1 of 2, device cpu" in table
    assert " phase_switch " in table and "aten::" in table
    log = (run.parent / "stderr.txt").read_text()
    assert "profile: steps 2-3, then every 3 steps to step 8, after 1 warmup step, on ranks 0, 1 (into " in log
    said = [ln for ln in log.splitlines() if "profile of steps" in ln]
    assert len(said) == 2 and all("(ranks 0, 1); rank 0's step, host ms: step " in ln for ln in said), said
