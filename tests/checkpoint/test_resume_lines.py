"""What a resume with another config says (``xpt_ds.checkpoint.tag_checks``): model keys that only build a fresh
start (kept as the checkpoint's), model keys applied from the resumed step on, and a validation set scored
otherwise. Until 2026-12-05 these went unsaid; the end-to-end case is test_resume's optimizer-settings test."""
from pathlib import Path

from xpt_ds.checkpoint.tag_checks import (keep_start_settings, micro_batch_change, model_changes,
                                         valid_set_change)
from xpt_ds.config import TrainConfig
from xpt_ds.config.manager import to_dict

TAG = Path("checkpoints/global_step000000006")


def _saved(cfg: TrainConfig) -> dict:
    return {"config": to_dict(cfg)}


def test_model_keys_changed_at_a_resume_are_said_and_start_settings_kept():
    cfg = TrainConfig()
    client = _saved(cfg)
    assert model_changes(TAG, client, cfg) == []
    cfg.model.init_seed, cfg.model.embedding_init = 7, "source_mean"
    cfg.model.dropout, cfg.model.mask_token = 0.3, "</s>"
    start, live = model_changes(TAG, client, cfg)
    assert start.startswith(f"resuming {TAG.name} with other start settings than built its weights (model.init_seed "
                            "1234 -> 7; model.embedding_init 'random' -> 'source_mean'): they decide only")
    assert live == (f"resuming {TAG.name} with other model settings than it was trained with (model.dropout -1.0 -> "
                    "0.3; model.mask_token '' -> '</s>'): they apply from this step on")
    keep_start_settings(client, cfg)
    assert (cfg.model.init_seed, cfg.model.embedding_init, cfg.model.dropout) == (1234, "random", 0.3)
    assert len(model_changes(TAG, client, cfg)) == 1  # only the live keys are still other


def test_a_validation_set_changed_at_a_resume_is_said():
    cfg = TrainConfig()
    cfg.data.valid_shards = ["corpus/manifest.json:valid"]
    client = _saved(cfg)
    assert valid_set_change(TAG, client, cfg, True) == []
    cfg.data.valid_shards, cfg.logging.eval_batches = ["corpus/manifest.json:test"], 9
    line, = valid_set_change(TAG, client, cfg, True)
    assert line.startswith(f"resuming {TAG.name} with another validation set than it was scored on (data.valid_shards "
                           "['corpus/manifest.json:valid'] -> ['corpus/manifest.json:test']; logging.eval_batches ")
    assert "best.json and early stopping compare them with those" in line
    assert valid_set_change(TAG, client, cfg, False) == []  # no validation now: nothing to compare


def test_an_mlm_run_resumed_at_another_micro_batch_says_it_leaves_its_trajectory():
    """A review (2026-12-05) resumed a micro-batch-2 MLM run at micro-batch 1 with grad_accum 2 (the same global
    batch): its losses left the uninterrupted run's at once, silently. A decoder's do not."""
    cfg = TrainConfig()
    cfg.optim.micro_batch_size = 2
    client = _saved(cfg)
    cfg.optim.micro_batch_size, cfg.optim.grad_accum = 1, 2
    line = micro_batch_change(TAG, client, cfg.optim, causal=False)
    assert line.startswith(f"resuming {TAG.name} at optim.micro_batch_size 1, where it trained at 2: a step averages")
    assert micro_batch_change(TAG, client, cfg.optim, causal=True) is None
    cfg.optim.micro_batch_size = 2
    assert micro_batch_change(TAG, client, cfg.optim, causal=False) is None
