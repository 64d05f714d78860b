"""guard.early_stop_rewind: when early stopping (or the time budget) ends a phase that holds the run's best checkpoint,
the next phase starts from that checkpoint's exact fp32 weights, not from where the phase stopped; a resume from the
phase's end rewinds the same way, to the same bits. One rank, and two under ZeRO-3 with bf16 through torchrun."""
import json
import re

import pytest
import torch
from conftest import REPO, base_config, launch, read_metrics, write_config

from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.store import read_client_state
from xpt_ds.checkpoint.tags import tag_for

PHASE2_TRAINS = r"lm_head\.bias"  # phase 2 trains only this: every other weight ends where phase 2 started


def _run(root, tiny_roberta, corpus, rewind: bool, nproc: int = 1, ds: str = "zero2_fp32", phase1=None,
         eval_every: int = 1, **guard):
    """Phase 1 at an lr that makes the validation loss jump about, so that early stopping (2 passes without a new
    low) ends it before its 8 steps, 2 steps after its best; phase 2 trains the LM head's bias only. ``guard``:
    more guard keys, or other values; ``phase1``: other phase-1 keys."""
    cfg = base_config(root / "run", tiny_roberta, corpus, deepspeed=str(REPO / f"ds_configs/{ds}.json"),
                      checkpoint={"every_steps": 0, "keep_best": True},
                      guard={"early_stop_patience": 2, "early_stop_rewind": rewind, **guard})
    cfg["phases"] = [{"name": "phase1", "steps": 8, "lr": 0.3, **(phase1 or {})},
                     {"name": "phase2", "steps": 2, "lr": 1e-3, "trainable": [PHASE2_TRAINS]}]
    cfg["logging"].update(eval_every=eval_every, tensorboard=False)
    path = write_config(root / "cfg.yaml", cfg)
    proc = launch(["--config", str(path)], nproc=nproc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run", path, proc


@pytest.fixture(scope="module")
def rewound(tmp_path_factory, tiny_roberta, corpus):
    return _run(tmp_path_factory.mktemp("rewound"), tiny_roberta, corpus, rewind=True)


def _weights(run, step):
    return load_checkpoint_fp32(run / "checkpoints", tag_for(step))


def _held(weights):
    """The weights phase 2 does not train (the LM head's bias is also named as its decoder's, which it ties)."""
    return {k: v for k, v in weights.items() if k not in ("lm_head.bias", "lm_head.decoder.bias")}


def _stop(proc) -> int:
    """The global step where early stopping ended phase 1."""
    return int(re.search(r"early stop: phase 'phase1' ends at its step (\d+) of 8", proc.stderr).group(1))


def test_the_next_phase_starts_from_the_best_checkpoint(rewound):
    run, _, proc = rewound
    stop = _stop(proc)
    valid = {s: r["valid/loss"] for s, r in read_metrics(run).items() if "valid/loss" in r}
    best_step = min(range(1, stop + 1), key=valid.get)
    assert best_step == stop - 2 and valid[best_step] < min(valid[stop - 1], valid[stop]), valid
    assert (f"the next phase starts from the best checkpoint {tag_for(best_step)} (step {best_step}, valid loss "
            f"{valid[best_step]:.4f}), not from step {stop} where early stopping ended phase 'phase1' "
            "(guard.early_stop_rewind)") in proc.stderr
    best, end, last = _weights(run, best_step), _weights(run, stop), _weights(run, stop + 2)
    held = _held(last)
    assert held.keys() <= best.keys() and len(held) > 10  # a phase-1 checkpoint also names the tied decoder
    assert all(torch.equal(held[k], best[k]) for k in held)  # phase 2 started from the best step's exact weights
    assert not all(torch.equal(held[k], end[k]) for k in held)  # ... not from the stop step's
    assert not torch.equal(last["lm_head.bias"], best["lm_head.bias"])  # and it trained
    assert read_client_state(run / "checkpoints", tag_for(stop + 2))["trainer"]["global_step"] == stop + 2
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_a_resume_from_the_phases_end_rewinds_to_the_same_bits(rewound):
    run, path, first_proc = rewound
    stop = _stop(first_proc)
    first = _weights(run, stop + 2)
    proc = launch(["--config", str(path), "--resume", tag_for(stop)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(stop)}" in proc.stderr
    assert "the next phase starts from the best checkpoint" in proc.stderr
    again = _weights(run, stop + 2)
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)


def test_without_it_the_next_phase_starts_where_early_stopping_ended(tmp_path, tiny_roberta, corpus):
    run, _, proc = _run(tmp_path, tiny_roberta, corpus, rewind=False)
    stop = _stop(proc)
    assert "the next phase starts from the best checkpoint" not in proc.stderr
    end, held = _weights(run, stop), _held(_weights(run, stop + 2))
    assert all(torch.equal(held[k], end[k]) for k in held)


def test_patience_reached_at_the_phases_last_step_is_no_early_stop(tmp_path, tiny_roberta, corpus):
    """Validation at steps 2 and 4 of a 4-step phase 1 at a constant lr of 0.3, patience 1: step 4 does not improve
    on step 2, which would end the phase, but step 4 is its last planned step anyway. The phase ran all its steps,
    so nothing rewinds: phase 2 starts where phase 1 ended, not from the best checkpoint (step 2)."""
    run, _, proc = _run(tmp_path, tiny_roberta, corpus, rewind=True, eval_every=2, early_stop_patience=1,
                        phase1={"steps": 4, "warmup_steps": 0, "decay": "constant"})
    valid = {s: r["valid/loss"] for s, r in read_metrics(run).items() if "valid/loss" in r}
    assert valid[4] >= valid[2], valid  # patience is used up at step 4
    assert "early stop:" not in proc.stderr and "the next phase starts from the best checkpoint" not in proc.stderr
    end, held = _weights(run, 4), _held(_weights(run, 6))
    assert all(torch.equal(held[k], end[k]) for k in held)
    assert not read_client_state(run / "checkpoints", tag_for(4))["best"]["stopped"]


def test_two_ranks_under_zero3_bf16_rewind_to_the_best_checkpoints_bits(tmp_path, tiny_roberta, corpus):
    """Every rank reads the best checkpoint's partitions whole (as the export does) and the new phase's engine
    partitions them again; frozen weights come from the checkpoint's exact fp32 copy, not the bf16 module."""
    run, _, proc = _run(tmp_path, tiny_roberta, corpus, rewind=True, nproc=2, ds="zero3_bf16")
    stop = _stop(proc)
    assert "the next phase starts from the best checkpoint" in proc.stderr
    best = _weights(run, stop - 2)
    held = _held(_weights(run, stop + 2))
    assert held.keys() <= best.keys() and all(torch.equal(held[k], best[k]) for k in held)
    assert not all(torch.equal(held[k], _weights(run, stop)[k]) for k in held)


def test_the_time_budget_ending_a_phase_past_its_best_rewinds_too(tmp_path, tiny_roberta, corpus):
    """guard.max_train_minutes=0.0005 (0.03 s, of which phase 1's share is 0.024 s) is used up by phase 1's first
    step, so the budget ends phase 1 at its step 2, which is validated as every phase's end is, and phase 2, with
    nothing left, at its first step. At lr 0.3 step 2 validates above step 1: phase 1 ended past its best, and
    phase 2 starts from step 1's weights. Early stopping's patience (100) never fires here."""
    run, path, proc = _run(tmp_path, tiny_roberta, corpus, rewind=True, max_train_minutes=0.0005,
                           early_stop_patience=100)
    assert "time budget: phase 'phase1' ends at its step 2 of 8" in proc.stderr
    assert "early stop:" not in proc.stderr
    valid = {s: r["valid/loss"] for s, r in read_metrics(run).items() if "valid/loss" in r}
    assert valid[2] > valid[1], valid
    assert (f"the next phase starts from the best checkpoint {tag_for(1)} (step 1, valid loss {valid[1]:.4f}), not "
            "from step 2 where the time budget ended phase 'phase1' (guard.early_stop_rewind)") in proc.stderr
    best, end, last = _weights(run, 1), _weights(run, 2), _weights(run, 3)
    held = _held(last)
    assert held.keys() <= best.keys() and len(held) > 10
    assert all(torch.equal(held[k], best[k]) for k in held)
    assert not all(torch.equal(held[k], end[k]) for k in held)
    assert json.loads((run / "status.json").read_text())["time_stopped"] == ["phase1", "phase2"]
    again = launch(["--config", str(path), "--resume", tag_for(2)])  # the budget's decision is in the checkpoint
    assert again.returncode == 0, again.stderr[-3000:]
    assert "where the time budget ended phase 'phase1' (guard.early_stop_rewind)" in again.stderr
    resumed = _weights(run, 3)
    assert last.keys() == resumed.keys() and all(torch.equal(last[k], resumed[k]) for k in last)
