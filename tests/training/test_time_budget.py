"""guard.max_train_minutes: the training loop's wall-clock budget, shared out among the phases by their planned steps
(xpt_ds.training.time_budget), decided the same on every rank and kept over a resume."""
import json
from types import SimpleNamespace

import pytest
import yaml
from conftest import base_config, launch, read_metrics, write_config

from xpt_ds.checkpoint.store import read_client_state
from xpt_ds.checkpoint.tags import complete_tags, tag_for
from xpt_ds.config import ConfigError, load_config
from xpt_ds.training.state import TrainerState
from xpt_ds.training.time_budget import TimeBudget, phase_share, share_used


def test_a_phase_gets_what_is_left_in_proportion_to_its_planned_steps():
    assert phase_share(600.0, 0.0, [100, 300], 0) == 150.0
    assert phase_share(600.0, 150.0, [100, 300], 1) == 450.0  # the last phase: all that is left
    assert phase_share(600.0, 50.0, [100, 300], 1) == 550.0  # phase 1 ended early: its unused time goes on
    assert phase_share(600.0, 700.0, [100, 300], 1) == 0.0  # overspent: nothing, never negative
    assert phase_share(600.0, 0.0, [200, 100, 100], 1) == 300.0


def test_share_used_is_off_without_a_budget_and_counts_from_the_phase_start():
    state = TrainerState(phase_index=1, train_seconds=1000.0, phase_start_seconds=150.0)
    assert not share_used(0.0, state, [100, 300])
    assert share_used(600.0, state, [100, 300])
    state.train_seconds = 599.0  # 449 s into phase 1's 450
    assert not share_used(600.0, state, [100, 300])


def test_a_phase_ends_while_its_share_still_holds_its_longest_step_with_a_save():
    """The step that ends a phase validates and saves: ending once the share is used overran the budget by that
    step. The longest step of the attempt so far stands for it."""
    budget = TimeBudget(10.0, [SimpleNamespace(steps=100, name="phase1"), SimpleNamespace(steps=300, name="p2")])
    state = TrainerState()
    budget.start_loop(state)
    budget.add(state, 57.0)  # a step with a validation pass and a save
    for _ in range(3):
        budget.add(state, 10.0)
    assert not budget.up and state.train_seconds == 87.0  # phase 1's share: 150 s; 87 + 57 < 150
    budget.add(state, 10.0)  # 97 s: 53 s left, which would not hold a 57 s step
    assert budget.up
    state.phase_step = 7
    line = budget.stop_here(state)
    assert line.startswith("time budget: phase 'phase1' ends at its step 7 of 100") and "phase 'p2' starts next" in line
    assert "it trained 97.0 s of its 150.0 s share of guard.max_train_minutes=10 (the 53.0 s left would not hold "\
           "its longest step, 57.0 s with validation and save)" in line
    off = TimeBudget(0.0, [SimpleNamespace(steps=100, name="phase1")])
    off.add(state, 1e9)
    assert not off.up and off.longest == 0.0 and state.train_seconds == 97.0


@pytest.fixture(scope="module")
def timed(tmp_path_factory, tiny_roberta, corpus):
    """2 ranks (torchrun), 4 + 4 planned steps and a budget of 0.03 s: phase 1's share (half) is used by its first
    step, so it ends at its step 2; nothing is left for phase 2, which ends at its first step. The run is then
    started again with the same config (an automatic resume from its last checkpoint)."""
    root = tmp_path_factory.mktemp("timed")
    cfg = base_config(root / "run", tiny_roberta, corpus, guard={"max_train_minutes": 0.0005})
    cfg["logging"]["tensorboard"] = False
    path = write_config(root / "cfg.yaml", cfg)
    first = launch(["--config", str(path)], nproc=2)
    assert first.returncode == 0, first.stderr[-3000:]
    status = json.loads((root / "run/status.json").read_text())
    again = launch(["--config", str(path)], nproc=2)
    assert again.returncode == 0, again.stderr[-3000:]
    return root / "run", first, status, again


def test_each_phase_ends_when_its_share_is_used(timed):
    run, first, status, _ = timed
    assert "time budget: phase 'phase1' ends at its step 2 of 4 (global step 2)" in first.stderr
    assert "of guard.max_train_minutes=0.0005; phase 'phase2' starts next" in first.stderr
    assert ("time budget: phase 'phase2' ends at its step 1 of 4 (global step 3): the earlier phases had used all of "
            "guard.max_train_minutes=0.0005; the run ends") in first.stderr
    assert "the run ends" in first.stderr
    assert first.stderr.count("time budget: phase") == 2  # rank 0 alone says it; rank 1 decided the same
    assert (status["state"], status["global_step"], status["total_steps"]) == ("finished", 3, 3)
    assert status["time_stopped"] == ["phase1", "phase2"] and status["train_seconds"] > 0
    metrics = read_metrics(run)
    assert sorted(s for s, r in metrics.items() if "valid/loss" in r) == [2, 3]  # each phase end validates
    assert {s: r["train/phase"] for s, r in metrics.items() if "train/phase" in r} == {1: 0, 2: 0, 3: 1}
    assert complete_tags(run / "checkpoints")[-2:] == [tag_for(2), tag_for(3)]
    trainer = read_client_state(run / "checkpoints", tag_for(2))["trainer"]
    assert trainer["time_stopped"] == [0] and trainer["phase_step"] == 2 and trainer["train_seconds"] > 0
    assert read_client_state(run / "checkpoints", tag_for(3))["trainer"]["time_stopped"] == [0, 1]


def test_a_resume_after_the_budget_ended_the_run_trains_nothing(timed):
    run, _, status, again = timed
    assert f"resumed from {tag_for(3)}" in again.stderr
    assert "time budget: phase" not in again.stderr
    after = json.loads((run / "status.json").read_text())
    assert (after["state"], after["global_step"], after["time_stopped"]) == ("finished", 3, ["phase1", "phase2"])
    # the count its last checkpoint holds (the first run's status adds the time of that save itself)
    saved = read_client_state(run / "checkpoints", tag_for(3))["trainer"]["train_seconds"]
    assert after["train_seconds"] == round(saved, 1) <= status["train_seconds"]


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf")])
def test_a_bad_budget_is_one_line_naming_the_key(tmp_path, tiny_roberta, corpus, value):
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus, guard={"max_train_minutes": value})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError) as info:
        load_config(str(path), [])
    assert "'guard.max_train_minutes'" in str(info.value) and "\n" not in str(info.value)
