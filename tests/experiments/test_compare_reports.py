"""The comparison report's accounting (experiments.uagec.compare_trelm): the equal-compute claim of
launch/compare_trelm_uagec.sh rests on counting each run's rows of 128 tokens from its resolved config."""
from __future__ import annotations

import dataclasses

import yaml

from conftest import REPO
from xpt_ds.config import load_config

from experiments.uagec.compare_trelm import rows_by_step

OVERRIDES = ["--model.source=dummy/source", "--optim.micro_batch_size=4", "--optim.grad_accum=1"]
NO_CDLM = ["--phases.1.objectives=[mlm_target,mlm_source]", "--phases.2.objectives=[mlm_target,mlm_source]",
           "--data.parallel_shards=[]"]


def _rows(tmp_path, name: str, config: str, extra: list[str]) -> list[int]:
    """rows_by_step of a run folder holding the config.yaml the trainer writes for ``config`` + overrides."""
    cfg = load_config(str(REPO / "launch/configs" / config), OVERRIDES + extra)
    run = tmp_path / name
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg)))
    return rows_by_step(run)


def test_trelm_xpt_and_the_ablations_train_on_the_same_rows(tmp_path):
    xpt = _rows(tmp_path, "xpt", "uagec_init_compare.yaml", [])
    assert len(xpt) == 401 and xpt[200] == 800 and xpt[-1] == 1600
    trelm = _rows(tmp_path, "trelm", "trelm_uagec.yaml", [])
    # 40 steps of 8 rows in each of common, en_x, x_en (4 target + 4 English MLM or 4 CdLM pairs), then 160 of 4
    assert len(trelm) == 281 and (trelm[40], trelm[80], trelm[120], trelm[-1]) == (320, 640, 960, 1600)
    assert _rows(tmp_path, "no_cdlm", "trelm_uagec.yaml", NO_CDLM) == trelm
    assert _rows(tmp_path, "accum", "trelm_uagec.yaml", ["--optim.grad_accum=2"])[-1] == 3200
    assert _rows(tmp_path, "pairs", "trelm_uagec.yaml", ["--data.parallel_micro_batch=2"])[-1] == 1600 - 2 * 40 * 2
