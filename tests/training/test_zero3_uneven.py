"""ZeRO-3 on a world size that does not divide a trained parameter's size: the last rank's partition of it is
padded. Until 2026-12-04 every fill of the fp32 masters (``xpt_ds.training.fill``: the start, the phase switch)
took a whole partition from the value at ``rank x partition`` on that rank, past the value's end: 3 ranks stopped
with "start (8534) + length (4267) exceeds dimension size (12800)", as a 2,048-wide norm on 6 GPUs would."""
import pytest

from conftest import REPO, base_config, launch, read_metrics, write_config
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import tag_for

pytestmark = pytest.mark.multiproc


def _losses(run):
    return {step: row["train/loss"] for step, row in read_metrics(run).items() if "train/loss" in row}


def test_three_ranks_train_both_phases_as_one_rank_with_the_same_global_batch(tmp_path, tiny_roberta_nodrop, corpus):
    runs = {}
    for nproc, accum in ((3, 1), (1, 3)):  # global batch 6 both
        run = tmp_path / f"ranks{nproc}"
        cfg = base_config(run, tiny_roberta_nodrop, corpus, deepspeed=str(REPO / "ds_configs/zero3_fp32.json"),
                          checkpoint={"every_steps": 0})
        cfg["optim"]["grad_accum"] = accum
        proc = launch(["--config", str(write_config(tmp_path / f"ranks{nproc}.yaml", cfg))], nproc=nproc)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[nproc] = run
    weights = {n: load_checkpoint_fp32(run / "checkpoints", tag_for(8)) for n, run in runs.items()}
    assert any(w.numel() % 3 for w in weights[3].values())  # some partition padded
    one, three = _losses(runs[1]), _losses(runs[3])
    assert sorted(three) == list(range(1, 9))
    assert all(three[s] == pytest.approx(one[s], rel=1e-5) for s in one), (three, one)
    for name, value in weights[1].items():
        assert weights[3][name].equal(value) or (weights[3][name] - value).abs().max() < 1e-5, name
