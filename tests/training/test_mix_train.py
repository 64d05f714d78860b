"""data.mix in a training run: a Llama-layout decoder on 2 ranks (torchrun) blends a second corpus into its rows in
phase 2 only (phase 1 sets its weight to 0, as English replay would be wasted on frozen layers), validates it on its
own (valid/NAME/*) in both phases, logs its epoch, counts only data.train_shards' rows as target tokens, resumes
inside phase 2 bit for bit, and says so in the export's model card."""
import json
import shutil

import pytest

from conftest import base_config, launch, read_metrics, write_config
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.cli.export import main as export_main
from xpt_ds.data.mixture import Schedule, quotas

pytestmark = pytest.mark.multiproc

WEIGHT = 0.25


def test_a_blended_run_validates_each_corpus_and_resumes_exactly(tmp_path, tiny_decoder, corpus):
    # The blended corpus is the prepared corpus's test split, validated on the valid split: the same shards as
    # data.valid_shards, so its valid/en/* must equal valid/* exactly (one scoring path for both).
    mix = [{"name": "en", "shards": [f"{corpus}/manifest.json:test"], "weight": WEIGHT,
            "valid_shards": [f"{corpus}/manifest.json:valid"]}]
    cfg = base_config(tmp_path / "straight", tiny_decoder("llama", False), corpus, checkpoint={"every_steps": 6})
    cfg["data"]["mix"] = mix
    cfg["phases"][0]["mix"] = {"en": 0}
    cfg["logging"]["eval_every"] = 3
    proc = launch(["--config", str(write_config(tmp_path / "s.yaml", cfg))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step 3: valid loss of the data.mix corpora: en " in proc.stderr, proc.stderr[-3000:]
    assert "data.mix from sequence 0: data.train_shards 100.00%, en 0.00%" in proc.stderr
    assert "data.mix from sequence 32: data.train_shards 75.00%, en 25.00%" in proc.stderr
    want = read_metrics(tmp_path / "straight")
    for step in (3, 6, 8):
        scored = {k: v for k, v in want[step].items() if k.startswith("valid/") and "/en/" not in k}
        assert scored and all(want[step][k.replace("valid/", "valid/en/")] == v for k, v in scored.items()), step
    assert "data/en/epoch" in want[8] and "data/train/epoch" not in want[8]
    assert want[4]["data/en/epoch"] == 0 and want[8]["data/en/epoch"] > 0  # 8 rows of 32 pieces: the test split's

    status = json.loads((tmp_path / "straight/status.json").read_text())
    rows = 4 * 2 * 2 * 2  # a phase's steps x ranks x micro-batch x grad_accum
    blend = Schedule(quotas([1 - WEIGHT, WEIGHT]))
    main_rows = rows + int(blend.before(2 * rows)[0] - blend.before(rows)[0])  # phase 1: all of them
    assert main_rows == rows + rows * (1 - WEIGHT)
    assert status["target_tokens_seen"] == main_rows * cfg["data"]["seq_len"] < status["tokens_seen"]

    cfg["run_dir"] = str(tmp_path / "resumed")
    shutil.copytree(tmp_path / "straight/checkpoints" / tag_for(6), tmp_path / "resumed/checkpoints" / tag_for(6))
    proc = launch(["--config", str(write_config(tmp_path / "r.yaml", cfg))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = read_metrics(tmp_path / "resumed")
    assert sorted(got) == list(range(7, 9))
    for step in got:
        assert got[step]["train/loss"] == want[step]["train/loss"], step
        assert got[step].get("valid/en/loss") == want[step].get("valid/en/loss"), step
    status_resumed = json.loads((tmp_path / "resumed/status.json").read_text())
    assert status_resumed["target_tokens_seen"] == status["target_tokens_seen"]

    assert export_main(["--run", str(tmp_path / "resumed"), "--out", str(tmp_path / "hf")]) == 0
    card = (tmp_path / "hf/README.md").read_text(encoding="utf-8")
    assert f"blended with `en` (25.00% of the rows, in phase `phase1` 0.00%: `{corpus}/manifest.json:test`)" in card
    assert f"({main_rows * cfg['data']['seq_len']:,} of them in rows of `data.train_shards`)" in card
    assert "on those of the `data.mix` corpus NAME, `en`" in card and "| en/loss | " in card
