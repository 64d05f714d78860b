"""``profile.*`` in a real run: two ranks through torchrun, both profiling twice, the second profile across the
phase hand-over. The run must train to the same losses and weights as the same run without profiling
(``engine_runs``'s zero2_fp32 run), and each rank writes its trace and table."""
import gzip
import json

import pytest
import torch

from conftest import REPO, base_config, launch, read_metrics, write_config
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.export.hf import load_checkpoint_fp32

pytestmark = pytest.mark.multiproc


def test_a_profiled_run_trains_to_the_same_bits_and_each_rank_writes_its_profiles(tmp_path, engine_runs,
                                                                                  tiny_roberta, corpus):
    plain = engine_runs("zero2_fp32")
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus, deepspeed=str(REPO / "ds_configs/zero2_fp32.json"),
                      checkpoint={"every_steps": 4},
                      profile={"start_step": 2, "steps": 2, "every": 3, "ranks": [0, 1]})  # 2-3, 5-6 (warmup 4)
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"

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
    said = [ln for ln in proc.stderr.splitlines() if "profile of steps" in ln]
    assert len(said) == 2 and all("(ranks 0, 1); rank 0's step, host ms: step " in ln for ln in said), said
