"""What ``python -m xpt_ds.cli.sweep`` does with the rows and run directories it finds in its folder: a folder moved
elsewhere still matches its rows; a row made with another config is skipped with a warning, or run again with
``--rerun-changed`` (unless it resolves to the config its run recorded); ``--dry-run`` says all this and changes
nothing; a row cut short is set aside before the sweep appends."""
import hashlib
import json
import shlex
import shutil
from pathlib import Path

import yaml

from sweep_builders import result_rows
from xpt_ds.checkpoint.tags import MARKER
from xpt_ds.config import load_config, to_dict
from xpt_ds.cli.sweep import main, parse_args
from xpt_ds.sweeps.plan import Run, build_plan
from xpt_ds.sweeps.runner import _Sweep


def test_a_moved_sweep_folder_still_matches_its_rows(tmp_path, sweep_config, capsys):
    """The rows of a sweep unpacked elsewhere (a later GPU session continuing launch/gpu_uagec.sh's results.tgz)
    are skipped without the changed-config warning; a changed setting still warns."""
    config, test_shards = sweep_config
    args = ["--config", str(config), "--methods", "xpt", "--sizes", "100", "--test-shards", *test_shards]
    old = build_plan(parse_args([*args, "--out", str(tmp_path / "first")]))
    row = {"method": "xpt", "size": 100, "seed": None, "config_sha256": old.config_sha["xpt"],
           "train_args": shlex.join(old.train_args(Run("xpt", 100)))}
    (tmp_path / "first/results.jsonl").write_text(json.dumps(row) + "\n")
    shutil.copytree(tmp_path / "first", tmp_path / "moved")
    for extra, warned in (([], False), (["--set", "optim.grad_accum=3"], True)):
        plan = build_plan(parse_args([*args, "--out", str(tmp_path / "moved"), *extra]))
        assert _Sweep(plan).pending() == []
        said = capsys.readouterr().out
        assert "skip xpt 100: its row is in" in said and ("another config" in said) == warned, said


def test_rerun_changed_runs_again_only_the_changed_arm_and_keeps_the_old_run(tmp_path, sweep_config, capsys):
    """--rerun-changed (a later GPU session fixing one arm's learning rate): the arm whose config changed is
    pending again, its old row moved to results.superseded.jsonl and its run directory set aside; the other
    arm's row is kept and skipped. Without the flag both are skipped, the changed one with a warning."""
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    args = ["--config", str(config), "--methods", "xpt", "scratch", "--sizes", "100", "--test-shards",
            *test_shards, "--out", str(out)]
    old = build_plan(parse_args(args))
    rows = [{"method": m, "size": 100, "seed": None, "config_sha256": old.config_sha[m], "ppl": 1.0,
             "train_args": shlex.join(old.train_args(Run(m, 100)))} for m in ("xpt", "scratch")]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "runs/scratch/100").mkdir(parents=True)
    (out / "runs/scratch/100/status.json").write_text('{"state": "finished"}')
    changed = [*args, "--set", "scratch:phases.0.lr=1e-4"]
    assert _Sweep(build_plan(parse_args(changed))).pending() == []
    assert "scratch 100 in" in capsys.readouterr().out and result_rows(out) == rows

    assert _Sweep(build_plan(parse_args([*changed, "--rerun-changed"]))).pending() == [Run("scratch", 100)]
    said = capsys.readouterr().out
    assert "skip xpt 100: its row is in" in said and "rerun scratch 100: its row was made with another config" in said
    assert result_rows(out) == rows[:1]
    assert [json.loads(line) for line in (out / "results.superseded.jsonl").read_text().splitlines()] == rows[1:]
    assert (out / "runs/scratch/100.superseded/status.json").is_file() and not (out / "runs/scratch/100").exists()


def test_a_row_whose_config_resolves_the_same_is_not_trained_again(tmp_path, sweep_config, capsys):
    """A row whose arm config or --set list reads differently (here: an lr that is now the arm's default, given
    by --set) but resolves to the config its run recorded (RUN_DIR/config.yaml) is skipped without a warning, also
    under --rerun-changed, also when the recorded config predates a section added since (its default is on both sides);
one that resolves differently is rerun."""
    config, test_shards = sweep_config  # phase 2's lr 5e-4: Scratch's one phase
    out = tmp_path / "sweep"
    args = ["--config", str(config), "--methods", "scratch", "--sizes", "100", "--test-shards", *test_shards,
            "--out", str(out), "--rerun-changed"]
    old = build_plan(parse_args(args))
    train_args = old.train_args(Run("scratch", 100))
    row = {"method": "scratch", "size": 100, "seed": None, "config_sha256": "written-otherwise", "ppl": 1.0,
           "train_args": shlex.join(train_args)}
    (out / "results.jsonl").write_text(json.dumps(row) + "\n")
    (out / "runs/scratch/100").mkdir(parents=True)
    recorded = to_dict(load_config(train_args[1], train_args[2:]))
    del recorded["activations"]  # recorded before that section existed: its default is what the run trained with
    (out / "runs/scratch/100/config.yaml").write_text(yaml.safe_dump(recorded, sort_keys=False))
    assert _Sweep(build_plan(parse_args([*args, "--set", "scratch:phases.0.lr=5e-4"]))).pending() == []
    said = capsys.readouterr().out
    assert "skip scratch 100: its row is in" in said and "warning" not in said and result_rows(out) == [row]

    changed = build_plan(parse_args([*args, "--set", "scratch:phases.0.lr=1e-4"]))
    assert _Sweep(changed).pending() == [Run("scratch", 100)]
    assert "rerun scratch 100: its row was made with another config" in capsys.readouterr().out
    assert not (out / "results.jsonl").read_text() and (out / "runs/scratch/100.superseded/config.yaml").is_file()


def test_a_dry_run_says_what_the_sweep_would_do_and_changes_nothing(tmp_path, sweep_config, capsys):
    """--dry-run on a sweep folder with a finished row, a changed one (--rerun-changed), a run directory without a
    checkpoint, one with a complete checkpoint, a new run, a row cut short and a unigram reference not yet scored:
    each is said, and no file in the folder changes (no configs written either)."""
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    args = ["--config", str(config), "--methods", "xpt", "scratch", "adapters", "xpt_sp", "xpt_no_itl", "--sizes",
            "100", "--test-shards", *test_shards, "--out", str(out)]
    old = build_plan(parse_args(args))
    rows = [{"method": m, "size": 100, "seed": None, "config_sha256": old.config_sha[m], "ppl": 1.0,
             "train_args": shlex.join(old.train_args(Run(m, 100)))} for m in ("xpt", "scratch")]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"method": "adap')
    (out / "runs/adapters/100").mkdir(parents=True)
    (out / "runs/adapters/100/status.json").write_text('{"state": "running"}')
    tag = out / "runs/xpt_sp/100/checkpoints/global_step000000003"
    tag.mkdir(parents=True)
    (tag / MARKER).write_text('{"global_step": 3}')
    (out / "runs/xpt_sp/100/status.json").write_text('{"state": "preempted"}')
    shutil.rmtree(out / "configs")

    def files():
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.rglob("*") if p.is_file()}

    before = files()
    assert main([*args, "--dry-run", "--rerun-changed", "--set", "scratch:phases.0.lr=1e-4", "--unigram",
                 test_shards[0].replace(":test", ":train")]) == 0
    said = capsys.readouterr().out
    assert files() == before and not (out / "configs").exists()
    assert "would cut" in said and "skip xpt 100: its row is in" in said
    assert "would rerun scratch 100: its row was made with another config" in said
    assert "would start adapters 100 over: " in said and "has no complete checkpoint" in said
    assert "would resume xpt_sp 100 from global_step000000003" in said and "would run xpt_no_itl 100: 4 steps" in said
    assert "dry run: 4 of 5 runs would start; nothing was changed in" in said
    assert f"would score the unigram reference -> {out / 'unigram.json'}" in said


def test_a_row_cut_short_is_set_aside_before_the_sweep_appends(tmp_path, sweep_config, capsys):
    """A results.jsonl ending inside a row (a full disk or a crash while it was written) is cut back to its last
    whole row before the sweep appends: the tail is kept in results.partial.txt, the finished run still skipped,
    and the cut-short one pending again."""
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    args = ["--config", str(config), "--methods", "xpt", "scratch", "--sizes", "100", "--test-shards",
            *test_shards, "--out", str(out)]
    plan = build_plan(parse_args(args))
    row = json.dumps({"method": "xpt", "size": 100, "seed": None, "config_sha256": plan.config_sha["xpt"],
                      "train_args": shlex.join(plan.train_args(Run("xpt", 100)))}) + "\n"
    tail = '{"method": "scratch", "size": 100, "ppl": 12'
    (out / "results.jsonl").write_text(row + tail)
    assert _Sweep(plan).pending() == [Run("scratch", 100)]
    said = capsys.readouterr().out
    assert f"its last line ({len(tail)} bytes) was not a whole row; moved it to {out}/results.partial.txt" in said
    assert (out / "results.jsonl").read_text() == row and (out / "results.partial.txt").read_text() == tail + "\n"
    _Sweep(plan)  # nothing more to set aside
    assert (out / "results.partial.txt").read_text() == tail + "\n" and "not a whole row" not in capsys.readouterr().out


def test_bad_scoring_arguments_stop_the_sweep_before_any_run_trains(tmp_path, sweep_config):
    """Test shards, the unigram's shards and the fine-tuning flags and files are checked when the plan is built
    (a dry run says so too), as the trainer's config is: not after the first run has trained."""
    import pytest

    from xpt_ds.config import ConfigError
    config, test_shards = sweep_config
    good = tmp_path / "labels.csv"
    good.write_text("text,label\nx,a\ny,b\n")
    base = ["--config", str(config), "--methods", "xpt", "--sizes", "100", "--out", str(tmp_path / "sweep")]
    manifest = test_shards[0].rsplit(":", 1)[0]
    finetune = ["--finetune-train", str(good), "--finetune-test", str(good)]
    for extra, culprit in (
            (["--test-shards", f"{manifest}:nosuch"], "has no split 'nosuch'"),
            (["--test-shards", *test_shards, "--unigram", str(tmp_path / "nope-000000.tar")], "shard not found"),
            (["--test-shards", *test_shards, *finetune, "--finetune-metric", "spearman"],
             "--finetune-*: --metric 'spearman' is not a classification metric"),
            (["--test-shards", *test_shards, *finetune, "--finetune-label-column", "nosuch"], "no column 'nosuch'"),
            (["--test-shards", *test_shards, "--finetune-train", str(tmp_path / "missing.csv"), "--finetune-test",
              str(good)], "--train file not found"),
            (["--test-shards", *test_shards, *finetune, "--finetune-seeds", "1", "1"],
             "--seeds gives 1 more than once")):
        with pytest.raises(ConfigError, match=culprit.replace("*", "\\*")):
            build_plan(parse_args([*base, *extra]))
    assert not (tmp_path / "sweep/runs").exists()
    # a switch of finetune's passes as the switch alone (it was passed as '--save-model True', which finetune
    # refuses), and every --finetune-* flag reaches finetune's parser
    plan = build_plan(parse_args([*base, "--test-shards", *test_shards, *finetune, "--finetune-save-model",
                                  "--finetune-activation-checkpointing", "--finetune-lora-rank", "4"]))
    assert plan.finetune_args == ["--train", str(good), "--test", str(good), "--save-model", "--lora-rank", "4",
                                  "--activation-checkpointing"]


def test_a_row_scored_otherwise_is_scored_again_only_on_request_and_only_from_a_checkpoint(tmp_path, sweep_config,
                                                                                           capsys):
    """A row records its scoring. Rerun without the fine-tuning flags: the row keeps its fine-tuning, no warning.
    Rerun on other test shards: a warning; with --rerun-changed the row moves to results.superseded.jsonl and the
    run stays, to be scored from its checkpoint; a run without a complete checkpoint (unpacked without weights)
    is not scored again (that would train it again), and says why."""
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    manifest = test_shards[0].rsplit(":", 1)[0]
    good = tmp_path / "labels.csv"
    good.write_text("text,label\nx,a\ny,b\n")
    base = ["--config", str(config), "--methods", "xpt", "--sizes", "100", "--out", str(out)]
    old = build_plan(parse_args([*base, "--test-shards", *test_shards, "--finetune-train", str(good),
                                 "--finetune-test", str(good)]))
    run = Run("xpt", 100)
    row = {"method": "xpt", "size": 100, "seed": None, "config_sha256": old.config_sha["xpt"], "ppl": 1.0,
           "train_args": shlex.join(old.train_args(run)), "scoring": old.scoring(run)}
    (out / "results.jsonl").write_text(json.dumps(row) + "\n")
    assert _Sweep(build_plan(parse_args([*base, "--test-shards", *test_shards]))).pending() == []
    said = capsys.readouterr().out
    assert "skip xpt 100" in said and "warning" not in said

    other = [*base, "--test-shards", f"{manifest}:valid"]
    assert _Sweep(build_plan(parse_args([*other, "--rerun-changed"]))).pending() == []  # no checkpoint here
    said = capsys.readouterr().out
    assert "was scored with other test shards" in said and "holds no complete checkpoint to score again" in said
    tag = out / "runs/xpt/100/checkpoints/global_step000000004"
    tag.mkdir(parents=True)
    (tag / MARKER).write_text(json.dumps({"global_step": 4}))
    assert _Sweep(build_plan(parse_args(other))).pending() == []
    assert "--rerun-changed scores it again, without training it again" in capsys.readouterr().out
    assert _Sweep(build_plan(parse_args([*other, "--rerun-changed"]))).pending() == [run]
    assert "score again xpt 100: its row was made with another evaluation" in capsys.readouterr().out
    assert not result_rows(out) and tag.is_dir()  # the row moved aside, the run kept
    assert [json.loads(x) for x in (out / "results.superseded.jsonl").read_text().splitlines()] == [row]


def test_a_run_trained_with_another_config_and_no_row_is_not_scored_or_resumed_as_this_one(tmp_path, sweep_config,
                                                                                         capsys):
    """A run stopped after its training (or mid-training, with a checkpoint) before its row was written, then swept
    with another lr: its run directory recorded the old config (RUN_DIR/config.yaml), so it is not resumed or
    scored as the new one. Without --rerun-changed it is left with a warning; with it, it is set aside as
    RUN.superseded (no row to move) and trains from the start; a dry run says so. Unchanged, it is resumed."""
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    args = ["--config", str(config), "--methods", "xpt", "--sizes", "100", "--test-shards", *test_shards,
            "--out", str(out)]
    run, run_dir = Run("xpt", 100), out / "runs/xpt/100"
    train_args = build_plan(parse_args(args)).train_args(run)
    tag = run_dir / "checkpoints/global_step000000002"
    tag.mkdir(parents=True)
    (tag / MARKER).write_text('{"global_step": 2}')
    (run_dir / "status.json").write_text('{"state": "finished"}')
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(load_config(train_args[1], train_args[2:])),
                                                        sort_keys=False))
    assert _Sweep(build_plan(parse_args(args))).pending() == [run]  # the same config: scored (or resumed)
    assert "warning" not in capsys.readouterr().out

    changed = [*args, "--set", "phases.0.lr=0.02"]
    assert _Sweep(build_plan(parse_args(changed))).pending() == []
    said = capsys.readouterr().out
    assert "skip xpt 100: its run directory was trained with another config" in said
    assert "--rerun-changed trains it again" in said and tag.is_dir()
    assert main([*changed, "--rerun-changed", "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert "would rerun xpt 100: " in said and "would score" not in said and tag.is_dir()

    assert _Sweep(build_plan(parse_args([*changed, "--rerun-changed"]))).pending() == [run]
    said = capsys.readouterr().out
    assert f"rerun xpt 100: it was trained with another config or arguments; moved {run_dir} to 100.superseded" \
        in said, said
    assert not run_dir.exists() and (out / "runs/xpt/100.superseded/checkpoints/global_step000000002").is_dir()
    assert not (out / "results.jsonl").exists() and not (out / "results.superseded.jsonl").exists()


def test_a_fine_tuning_whose_every_seed_diverged_is_fine_tuned_again(tmp_path, sweep_config):
    """A fine-tuning whose every seed diverged leaves finetune/results.json with an empty summary (and fails, so
    the sweep records no sweep_args.json): the next sweep moves it to finetune.superseded and fine-tunes again
    (it read it as a finished fine-tuning and failed on its summary, every time). A complete results.json from
    before sweep_args.json was recorded is kept."""
    from xpt_ds.sweeps.scoring import downstream
    config, test_shards = sweep_config
    labels = tmp_path / "labels.csv"
    labels.write_text("text,label\nx,a\ny,b\n")
    plan = build_plan(parse_args(["--config", str(config), "--methods", "scratch", "--sizes", "100", "--test-shards",
                                  *test_shards, "--out", str(tmp_path / "sweep"), "--finetune-train", str(labels),
                                  "--finetune-test", str(labels), "--finetune-lr", "2e-5"]))
    run = Run("scratch", 100)
    finetune = plan.run_dir(run) / "finetune"
    finetune.mkdir(parents=True)

    def results(summary):
        return {"config": {"metric": "accuracy"}, "seeds": [{"seed": 1, "test": {"accuracy": 0.75}}],
                "summary": summary}

    class Stages:  # export and fine-tuning as the sweep starts them, without a model
        calls = []

        def module(self, module, argv, log, stage):
            self.calls.append(stage)
            return 1.0

        def process(self, cmd, log, stage):
            self.calls.append(stage)
            out = Path(cmd[cmd.index("--out") + 1])
            out.mkdir(exist_ok=True)
            (out / "results.json").write_text(json.dumps(results({"accuracy": {"mean": 0.75, "std": 0.0}})))
            return 2.0

    failed = {**results({}), "seeds": [{"seed": 1, "diverged": "epoch 1: train loss nan"}], "diverged": [1]}
    (finetune / "results.json").write_text(json.dumps(failed))
    row, exported = downstream(plan, run, Stages())
    assert Stages.calls == ["export", "finetune"] and exported
    assert row["downstream_mean"] == 0.75 and row["downstream_seeds"] == 1
    assert json.loads((finetune.parent / "finetune.superseded/results.json").read_text()) == failed
    assert json.loads((finetune / "sweep_args.json").read_text()) == plan.finetune_args

    (finetune / "sweep_args.json").unlink()  # fine-tuned before 2026-11-28, complete: kept
    assert downstream(plan, run, Stages()) == (row, False) and Stages.calls == ["export", "finetune"]


def test_a_corpus_prepared_again_in_place_is_another_training_and_other_scoring(tmp_path, sweep_config, capsys):
    """A row records the hash of the manifests behind its paths: the corpus prepared again in place (a grown
    corpus is split anew, its tokenizer trained again) keeps the paths, and until 2026-12-04 a rerun skipped the
    old rows and scored the new runs on the new test split, in one table without a word. Without --test-shards the
    sweep scores on the validation split, which the runs choose their checkpoints on: it says so."""
    from xpt_ds.sweeps.data_identity import manifests_sha
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    base = ["--config", str(config), "--methods", "xpt", "--sizes", "100", "--out", str(out)]
    plan = build_plan(parse_args([*base, "--test-shards", *test_shards]))
    assert "warning: no --test-shards" not in capsys.readouterr().err
    run = Run("xpt", 100)
    row = {"method": "xpt", "size": 100, "seed": None, "config_sha256": plan.config_sha["xpt"], "ppl": 1.0,
           "train_args": shlex.join(plan.train_args(run)), "scoring": plan.scoring(run),
           "data_sha256": plan.data_sha["xpt", 100]}
    assert row["data_sha256"] and row["scoring"]["test_data"] == manifests_sha(test_shards)
    (out / "results.jsonl").write_text(json.dumps(row) + "\n")
    assert _Sweep(build_plan(parse_args([*base, "--test-shards", *test_shards]))).pending() == []
    assert "warning" not in capsys.readouterr().out
    (out / "results.jsonl").write_text(json.dumps({**row, "scoring": {**row["scoring"], "test_data": "0" * 16}}) + "\n")
    assert _Sweep(build_plan(parse_args([*base, "--test-shards", *test_shards]))).pending() == []
    assert "was scored with other test shards, evaluation or fine-tuning (test_data 0000" in capsys.readouterr().out
    (out / "results.jsonl").write_text(json.dumps({**row, "data_sha256": "0" * 16}) + "\n")
    assert _Sweep(build_plan(parse_args([*base, "--test-shards", *test_shards]))).pending() == []
    assert "was trained on another preparation of its data" in capsys.readouterr().out
    assert _Sweep(build_plan(parse_args([*base, "--test-shards", *test_shards, "--rerun-changed"]))).pending() == [run]
    capsys.readouterr()
    # a row of before 2026-12-04 records no hash: skipped as before, and said once (it was skipped without a word)
    (out / "results.jsonl").write_text(json.dumps({k: v for k, v in row.items() if k != "data_sha256"}) + "\n")
    assert _Sweep(build_plan(parse_args([*base, "--test-shards", *test_shards]))).pending() == []
    said = capsys.readouterr().out
    assert said.count("note: 1 skipped row(s) of") == 1 and "record no hash of their data's manifests" in said
    # the hash follows the manifest's bytes, and a spec without a manifest has none
    manifest = Path(test_shards[0].rsplit(":", 1)[0])
    copy = tmp_path / "copy/manifest.json"
    copy.parent.mkdir()
    copy.write_text(manifest.read_text())
    assert manifests_sha([f"{copy}:test"]) == manifests_sha([f"{manifest}:test"]) != manifests_sha([f"{copy}:valid"])
    copy.write_text(manifest.read_text().replace('"format_version"', '"x": 1, "format_version"'))
    assert manifests_sha([f"{copy}:test"]) != manifests_sha([f"{manifest}:test"])
    assert manifests_sha([str(tmp_path / "train-000000.tar")]) is None
    with_valid = yaml.safe_load(Path(config).read_text())
    with_valid["data"]["valid_shards"] = list(test_shards)
    (tmp_path / "valid.yaml").write_text(yaml.safe_dump(with_valid))
    plan = build_plan(parse_args(["--config", str(tmp_path / "valid.yaml"), *base[2:]]))
    assert plan.test_shards == list(test_shards)
    assert "warning: no --test-shards: every run is scored on the base config's data.valid_shards" in \
        capsys.readouterr().err
