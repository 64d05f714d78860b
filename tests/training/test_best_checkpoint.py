"""checkpoint.keep_best (the run's best checkpoint, RUN_DIR/best.json, the tag name 'best') and early stopping
(guard.early_stop_patience), on one rank."""
import json
import math
import re

import pytest
import yaml
from conftest import base_config, launch, read_metrics, run_main, write_config

from xpt_ds.config import ConfigError, load_config
from xpt_ds.training.best import BestTracker
from xpt_ds.checkpoint.store import read_client_state
from xpt_ds.checkpoint.tags import NoBestError, complete_tags, resolve_tag, tag_for


def _best(run_dir) -> dict:
    return json.loads((run_dir / "best.json").read_text())


def _valid(run_dir) -> dict[int, float]:
    return {s: r["valid/loss"] for s, r in read_metrics(run_dir).items() if "valid/loss" in r}


def _train(root, tiny_roberta, corpus, phase1: tuple, phase2: tuple, log_every: int = 1, progress: bool = False,
           **sections):
    """A one-rank run of two phases ((steps, lr) each) with a validation pass every step; (root, config, proc)."""
    cfg = base_config(root / "run", tiny_roberta, corpus, **sections)
    cfg["phases"] = [{"name": f"phase{i + 1}", "steps": n, "lr": lr} for i, (n, lr) in enumerate((phase1, phase2))]
    cfg["logging"].update(eval_every=1, log_every=log_every, tensorboard=False, progress_bar=progress)
    path = write_config(root / "cfg.yaml", cfg)
    proc = launch(["--config", str(path)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, path, proc


@pytest.fixture(scope="module")
def kept(tmp_path_factory, tiny_roberta, corpus):
    """keep_best with keep_last 1, a validation pass every step; phase 2's lr makes the loss rise, so the best is
    an older checkpoint than the newest."""
    return _train(tmp_path_factory.mktemp("kept"), tiny_roberta, corpus, (3, 2e-3), (3, 0.3),
                  checkpoint={"every_steps": 0, "keep_last": 1, "keep_best": True})


def test_best_is_lowest_valid_loss_and_survives_keep_last(kept):
    root, _, proc = kept
    run = root / "run"
    valid = _valid(run)
    assert sorted(valid) == [1, 2, 3, 4, 5, 6]
    step = min(valid, key=valid.get)
    best = _best(run)
    assert best == {"tag": tag_for(step), "step": step, "valid_loss": valid[step],
                    "phase": "phase1" if step <= 3 else "phase2"}
    assert step < 6, valid  # phase 2's lr makes the loss rise: the best is not the newest checkpoint
    assert complete_tags(run / "checkpoints") == [tag_for(step), tag_for(6)]  # keep_last 1 + the best
    assert read_client_state(run / "checkpoints", tag_for(6))["best"]["best"] == best
    assert f"new best valid loss {valid[step]:.4f} (checkpoint {tag_for(step)})" in proc.stderr


def test_export_best(kept, tmp_path):
    root, _, _ = kept
    proc = run_main("xpt_ds.cli.export", ["--run", str(root / "run"), "--tag", "best", "--out", str(tmp_path / "hf")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "hf" / "config.json").is_file()


def test_resume_keeps_best(kept):
    """A resume from a later tag knows the earlier best (from the checkpoint's state, not from best.json)."""
    root, path, _ = kept
    run = root / "run"
    before = _best(run)
    (run / "best.json").unlink()
    proc = launch(["--config", str(path)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(6)}" in proc.stderr
    assert _best(run) == before
    assert resolve_tag(run / "checkpoints", "best") == before["tag"]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory, tiny_roberta, corpus):
    """Early stopping with a min_delta no pass can beat: every phase ends after 1 + 2 validation passes. Training
    losses are logged every 4 steps, so the early stops at steps 3 and 6 flush a partial window. The progress
    bar is on (and not drawn: stderr is a pipe)."""
    return _train(tmp_path_factory.mktemp("stopped"), tiny_roberta, corpus, (6, 1e-3), (6, 1e-3), log_every=4,
                  progress=True,
                  checkpoint={"every_steps": 0, "keep_best": True},
                  guard={"early_stop_patience": 2, "early_stop_min_delta": 10.0})


def test_early_stop_ends_each_phase(stopped):
    root, _, proc = stopped
    run = root / "run"
    metrics = read_metrics(run)
    assert {s: r["train/phase"] for s, r in metrics.items() if "train/phase" in r} == {3: 0, 4: 1, 6: 1}
    assert sorted(s for s, r in metrics.items() if "valid/loss" in r) == [1, 2, 3, 4, 5, 6]
    assert "early stop: phase 'phase1' ends at its step 3 of 6 (global step 3)" in proc.stderr
    assert "phase 'phase2' starts next" in proc.stderr
    assert "early stop: phase 'phase2' ends at its step 3 of 6 (global step 6)" in proc.stderr
    assert "the run ends" in proc.stderr
    assert "phase 'phase2' starts at global step 3" in proc.stderr
    assert complete_tags(run / "checkpoints")[-1] == tag_for(6)
    status = json.loads((run / "status.json").read_text())  # the early-stopped steps are not counted as still to run
    assert (status["state"], status["global_step"], status["total_steps"], status["eta_s"]) == ("finished", 6, 6, 0)
    # the progress's end moves at each early stop (no bar in a log file: the log steps' lines say step/total)
    assert re.findall(r"step (\d+)/(\d+): loss", proc.stderr) == [("3", "9"), ("4", "9"), ("6", "6")]
    state = read_client_state(run / "checkpoints", tag_for(3))
    assert state["trainer"]["phase_index"] == 0 and state["trainer"]["phase_step"] == 3
    assert state["best"]["stopped"] == [0] and state["best"]["stale"] == 2


def test_resume_after_early_stop_does_not_rerun_the_phase(stopped):
    """Resuming from phase 1's early end goes on with phase 2, and, that tag being older than the recorded best,
    with the best that tag recorded: step 4 is a new best again (it would not be against the abandoned branch's
    best), and best.json never names a checkpoint of the abandoned branch."""
    root, path, _ = stopped
    run = root / "run"
    best_at_3 = read_client_state(run / "checkpoints", tag_for(3))["best"]["best"]
    valid = _valid(run)
    assert _best(run)["step"] == 6 and valid[4] > valid[6] and best_at_3["step"] == 3  # the loss kept falling
    proc = launch(["--config", str(path), "--resume", tag_for(3)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "phase 'phase2' starts at global step 3" in proc.stderr
    assert "early stop: phase 'phase1'" not in proc.stderr
    assert "early stop: phase 'phase2' ends at its step 3 of 6 (global step 6)" in proc.stderr
    assert f"(checkpoint {tag_for(4)})" in proc.stderr
    assert (run / "checkpoints/abandoned/branch-001" / tag_for(6)).is_dir()
    assert max(s for s, r in read_metrics(run).items() if "train/loss" in r) == 6
    best = _best(run)
    assert best["tag"] in complete_tags(run / "checkpoints")  # never one of the abandoned branch
    assert best["valid_loss"] <= best_at_3["valid_loss"]


def test_restore_forgets_a_best_that_is_gone(tmp_path):
    """A branch's recorded best whose checkpoint was pruned after it stopped being the best: forgotten, and
    best.json goes."""
    tracker = BestTracker(keep=True)
    tracker.load_state_dict({"best": {"tag": tag_for(2), "step": 2, "valid_loss": 3.0, "phase": "p"},
                             "phase_index": 0, "phase_loss": 3.0, "stale": 0, "stopped": []})
    (tmp_path / "best.json").write_text("{}")
    tracker.restore(tmp_path, [tag_for(4)], 0)
    assert tracker.best is None and not (tmp_path / "best.json").exists()
    assert tracker.update(5.0, 5, tag_for(5), 0, "p") == (True, False)


def test_tracker_patience_counts_per_phase():
    tracker = BestTracker(keep=False, patience=2, min_delta=0.5)
    assert [tracker.update(x, i, tag_for(i), 0, "a")[1] for i, x in enumerate([4.0, 3.9, 3.0, 2.9], 1)] == [
        False, False, False, False]  # 3.0 improved by more than 0.5: the count restarts
    assert tracker.update(2.8, 5, tag_for(5), 0, "a")[1] and tracker.stopped == [0]
    assert not tracker.update(9.0, 6, tag_for(6), 1, "b")[1]  # a new phase: its first pass sets its best
    assert tracker.best is None and not math.isinf(tracker.phase_loss)


def test_a_slow_descent_counts_once_it_passes_min_delta():
    """The reference a pass must beat by min_delta moves only with a pass that did: each pass 0.3 below the last
    (min_delta 0.5) improves on it every second pass, and the early-stop line names the loss it did not beat."""
    tracker = BestTracker(keep=False, patience=2, min_delta=0.5)
    stops = [tracker.update(x, i, tag_for(i), 0, "a")[1] for i, x in enumerate([4.0, 3.7, 3.4, 3.1, 2.8, 2.5], 1)]
    assert stops == [False] * 6 and (tracker.phase_loss, tracker.stale) == (2.8, 1)
    assert [tracker.update(x, i, tag_for(i), 0, "a")[1] for i, x in enumerate([2.2, 2.1, 2.0], 7)] == [
        False, False, True]
    assert (tracker.phase_loss, tracker.stale) == (2.2, 2)


def test_best_tag_without_best_names_the_run(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(NoBestError) as info:
        resolve_tag(tmp_path / "checkpoints", "best")
    assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)


def _cfg(**changes) -> dict:
    cfg = {"model": {"source": "roberta-base", "tokenizer": "spm.model"},
           "phases": [{"name": "p1", "steps": 10, "lr": 1e-3}],
           "data": {"train_shards": ["train.tar"], "valid_shards": ["valid.tar"]}}
    for key, value in changes.items():
        section, name = key.split("__")
        cfg.setdefault(section, {})[name] = value
    return cfg


@pytest.mark.parametrize("changes, fragment", [
    (dict(checkpoint__keep_best=True, data__valid_shards=[]), "checkpoint.keep_best"),
    (dict(guard__early_stop_patience=2, data__valid_shards=[]), "guard.early_stop_patience"),
    (dict(guard__early_stop_patience=2, logging__eval_every=0), "guard.early_stop_patience"),
    (dict(guard__early_stop_patience=-1), "guard.early_stop_patience"),
    (dict(guard__early_stop_min_delta=-0.1), "guard.early_stop_min_delta"),
    (dict(guard__early_stop_rewind=True, guard__early_stop_patience=2), "guard.early_stop_rewind"),
    (dict(guard__early_stop_rewind=True, checkpoint__keep_best=True), "guard.early_stop_rewind"),
])
def test_config_errors(tmp_path, changes, fragment):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(_cfg(**changes)))
    with pytest.raises(ConfigError) as info:
        load_config(str(path), [])
    assert f"'{fragment}'" in str(info.value) and "\n" not in str(info.value)


def test_config_accepts_best_with_validation(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(_cfg(checkpoint__keep_best=True, guard__early_stop_patience=3)))
    cfg = load_config(str(path), [])
    assert cfg.checkpoint.keep_best and cfg.guard.early_stop_patience == 3
