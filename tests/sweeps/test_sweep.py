"""python -m xpt_ds.cli.sweep: real tiny runs through the CLI, resumability, failures, the report and the
data-efficiency interpolation."""
import json
import re

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import REPO, run_main, write_config
from sweep_builders import result_rows
from xpt_ds.sweeps.report import Match, efficiency, parse_size, size_label, size_to_match

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ROW_KEYS = {"method", "size", "steps", "epochs", "train_seconds", "wall_seconds", "ppl", "hits@1", "hits@3", "hits@5",
            "hits@10", "mrr", "mr", "loss", "eval_tokens", "run_dir", "train_args"}


def _sweep(args, timeout=600):
    """``python -m xpt_ds.cli.sweep ARGS`` in a process of its own (``run_main``); its training runs are real
    interpreters, as the sweep starts them."""
    return run_main("xpt_ds.cli.sweep", list(args), timeout=timeout)


def test_sweep_trains_evaluates_reports_and_skips_finished_runs(tmp_path, sweep_config):
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    # 4 steps x 4 sequences x 30 tokens = 480 tokens: 2.4 epochs of 200 tokens, 0.6 of 800
    args = ["--config", str(config), "--methods", "xpt", "scratch", "--sizes", "0.8K", "200", "--out", str(out),
            "--test-shards", *test_shards]
    proc = _sweep(args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    rows = result_rows(out)
    assert sorted((r["method"], r["size"]) for r in rows) == [("scratch", 200), ("scratch", 800), ("xpt", 200),
                                                              ("xpt", 800)]
    for r in rows:
        assert ROW_KEYS <= r.keys() and all(r[k] is not None for k in ROW_KEYS)
        assert r["steps"] == 4 and 1 <= r["ppl"] < 200 and 1 <= r["mr"] <= 200 and 0 <= r["hits@1"] <= r["hits@10"]
        assert r["epochs"] == pytest.approx(480 / r["size"])
        run_dir = out / "runs" / r["method"] / size_label(r["size"])
        assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
        assert f"--data.train_tokens={r['size']}" in r["train_args"]
    # scratch trains one phase of all 4 steps (a one-phase method on the two-phase base config)
    assert "steps: 4" in (out / "configs" / "scratch.yaml").read_text()

    md = (out / "results.md").read_text()
    assert "### 200 training tokens" in md and "### 800 training tokens" in md
    assert "| XPT |" in md and "| Scratch |" in md and "Scratch data needed to match each method's PPL" in md
    for metric in ("ppl", "hits_at_1", "hits_at_10", "mrr", "mr"):
        data = (out / f"plot_{metric}.png").read_bytes()
        assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR" and data[-8:-4] == b"IEND"
    import matplotlib.image
    assert matplotlib.image.imread(out / "plot_ppl.png").ndim == 3

    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["efficiency"]["ppl"]["xpt"]) == {"200", "800"}
    assert summary["efficiency"]["ppl"]["xpt"]["200"]["bound"] in ("=", "<=", ">")
    for method in ("xpt", "scratch"):
        acc = EventAccumulator(str(out / "tb" / method))
        acc.Reload()
        assert [e.step for e in acc.Scalars("sweep/ppl")] == [0, 1]  # step = index of the size
        assert [e.value for e in acc.Scalars("sweep/size_tokens")] == [200, 800]

    # --unigram given once every run has its row: the runs are skipped, and the reference, which a run finishing
    # in the invocation would score, is scored from a run's newest checkpoint; the report shows it.
    train_spec = test_shards[0].replace(":test", ":train")
    with_unigram = _sweep([*args, "--unigram", train_spec])
    assert with_unigram.returncode == 0, with_unigram.stdout[-2000:] + with_unigram.stderr[-3000:]
    assert with_unigram.stdout.count("skip ") == 4 and "warning" not in with_unigram.stdout
    assert re.search(r"scored the unigram reference with \S+ \S+'s newest checkpoint -> " + re.escape(
        str(out / "unigram.json")), with_unigram.stdout), with_unigram.stdout
    unigram = json.loads((out / "unigram.json").read_text())
    assert unigram["unigram"] == [train_spec] and unigram["tokens"] == json.loads(
        (out / "runs/xpt/200/eval.json").read_text())["tokens"]
    assert "Hits@1 over the unigram predictor's" in (out / "results.md").read_text()
    assert result_rows(out) == rows

    # Run again, as a later GPU session does: it unpacks the last one's results.tgz (no weights) on a fresh
    # machine, where one run had finished training but not its scoring (no row). The runs with rows are skipped,
    # untouched; that one cannot be scored without its checkpoints, so it is set aside whole and trained again.
    import shutil
    moved = tmp_path / "moved"
    shutil.copytree(out, moved, ignore=shutil.ignore_patterns("checkpoints"))
    kept = [r for r in rows if (r["method"], r["size"]) != ("xpt", 200)]
    (moved / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    logs = {d: (moved / d / "train.log").stat().st_mtime_ns for d in ("runs/xpt/800", "runs/scratch/200",
                                                                       "runs/scratch/800")}
    (moved / "runs/xpt/200/finetune").mkdir()
    (moved / "runs/xpt/200/finetune/results.json").write_text("{}")  # stale: must not be read as this run's
    again = _sweep([*args[:-3], str(moved), *args[-2:]])
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert again.stdout.count("skip ") == 3 and "warning" not in again.stdout
    assert {d: (moved / d / "train.log").stat().st_mtime_ns for d in logs} == logs
    assert f"xpt 200: {moved}/runs/xpt/200 has no complete checkpoint to resume or score (state 'finished'): " \
           "moved to 200.no_checkpoint, training it from the start" in again.stdout
    assert (moved / "runs/xpt/200.no_checkpoint/finetune/results.json").is_file()
    assert not (moved / "runs/xpt/200/finetune").exists()
    assert (moved / "runs/xpt/200/checkpoints").is_dir()  # trained again, here
    moved_rows = result_rows(moved)
    assert moved_rows[:3] == kept and (moved_rows[3]["method"], moved_rows[3]["size"]) == ("xpt", 200)

    # Its row lost again, its checkpoints kept: the sweep scores it and says so, without training it.
    trained = (moved / "runs/xpt/200/train.log").stat().st_mtime_ns
    (moved / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    again = _sweep([*args[:-3], str(moved), *args[-2:]])
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert f"score xpt 200: trained, with no row yet -> {moved}/runs/xpt/200" in again.stdout
    assert "run xpt 200" not in again.stdout and (moved / "runs/xpt/200/train.log").stat().st_mtime_ns == trained
    assert (result_rows(moved)[3]["method"], result_rows(moved)[3]["size"]) == ("xpt", 200)


def test_sweep_replicates_in_parallel_scores_the_best_checkpoint_and_reports_a_failed_run(tmp_path, sweep_config,
                                                                                           corpus, corpus_text):
    """Issue 22's sweep: two seeds of a run side by side (--parallel 2), each scored and fine-tuned from its best
    checkpoint (checkpoint.keep_best), the unigram predictor beside them, the seeds folded into mean ± std, and a
    run that cannot start reported while the others finish."""
    config, test_shards = sweep_config
    sentences = [s for s in corpus_text.read_text(encoding="utf-8").splitlines() if s][:24]
    examples = tmp_path / "labels.jsonl"
    examples.write_text("".join(json.dumps({"text": s, "label": "long" if len(s.split()) > 8 else "short"},
                                           ensure_ascii=False) + "\n" for s in sentences), encoding="utf-8")
    out = tmp_path / "sweep"
    proc = _sweep(["--config", str(config), "--methods", "xpt_sp", "--sizes", "300", "10M", "--out", str(out),
                   "--seeds", "1", "2", "--parallel", "2", "--test-shards", *test_shards,
                   "--unigram", f"{corpus}/manifest.json:train", "--finetune-sizes", "300",
                   "--set", f"data.valid_shards=[{corpus}/manifest.json:valid]", "checkpoint.keep_best=true",
                   "logging.eval_every=2",
                   "--finetune-train", str(examples), "--finetune-test", str(examples),
                   "--finetune-seeds", "1", "--finetune-epochs", "1", "--finetune-max-length", "32"])
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    for seed in (1, 2):
        failed_log = out / "runs" / "xpt_sp" / "10M" / f"seed{seed}" / "train.log"
        assert f"failed: xpt_sp 10M seed {seed} (train exited 2); log: {failed_log}" in proc.stderr
        assert "data.train_tokens" in failed_log.read_text()  # the corpus holds fewer tokens than that

    rows = sorted(result_rows(out), key=lambda r: r["seed"])
    assert [(r["method"], r["size"], r["seed"]) for r in rows] == [("xpt_sp", 300, 1), ("xpt_sp", 300, 2)]
    for r in rows:
        assert f"--model.init_seed={r['seed']}" in r["train_args"] and f"--data.seed={r['seed']}" in r["train_args"]
        best = json.loads((out / r["run_dir"] / "best.json").read_text())
        assert r["checkpoint"] == best["tag"] == r["best"]["tag"]  # evaluate scored the best checkpoint
        assert "--tag best" in (out / r["run_dir"] / "finetune.log").read_text()  # and export exported it
        assert (r["downstream_metric"], r["downstream_seeds"], len(r["downstream_values"])) == ("accuracy", 1, 1)
        assert r["downstream_std"] is None  # one fine-tuning seed: no spread, not a spread of 0
    assert rows[0]["loss"] != rows[1]["loss"]  # other seeds, other runs, scored on the same masks
    evals = [json.loads((out / r["run_dir"] / "eval.json").read_text()) for r in rows]
    assert evals[0]["seed"] == evals[1]["seed"] == 0 and evals[0]["tokens"] == evals[1]["tokens"]
    for log in out.glob("runs/*/*/*/*.log"):  # the sweep's own lines never land in a run's redirected log
        said = ("run ", "score ", "resume ", "start ", "done ", "FAILED ")
        assert not any(x.startswith(said) for x in log.read_text().splitlines()), log
    unigram = json.loads((out / "unigram.json").read_text())
    assert unigram["unigram"] == [f"{corpus}/manifest.json:train"] and unigram["tokens"] == evals[0]["tokens"]

    md = (out / "results.md").read_text()
    mean_ppl = (rows[0]["ppl"] + rows[1]["ppl"]) / 2
    assert f"{mean_ppl:.2f} ± " in md and "| seeds |" in md and "*Unigram predictor*" in md
    assert "Hits@1 over the unigram predictor's" in md and "accuracy (×100)" in md
    assert "Failed runs" in md and "xpt_sp 10M seed 2" in md
    assert (out / "plot_downstream.png").read_bytes()[:8] == PNG_SIGNATURE
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"] == 2 and summary["rows"][0]["seeds"] == 2 and summary["unigram"]["hits@1"] >= 0
    assert summary["rows"][0]["ppl"] == pytest.approx(mean_ppl)
    assert sorted(f["stage"] for f in summary["failed"]) == ["train", "train"]

    # Scored again on other shards with other fine-tuning (a later session fixing its evaluation): a row records
    # its scoring, so without --rerun-changed each is skipped with a warning, and with it each is scored and
    # fine-tuned again (the old fine-tuning and unigram set aside) without training again.
    valid = [f"{corpus}/manifest.json:valid"]
    again = ["--config", str(config), "--methods", "xpt_sp", "--sizes", "300", "--out", str(out), "--seeds", "1", "2",
             "--test-shards", *valid, "--unigram", f"{corpus}/manifest.json:train", "--finetune-sizes", "300",
             "--set", f"data.valid_shards=[{corpus}/manifest.json:valid]", "checkpoint.keep_best=true",
             "logging.eval_every=2", "--finetune-train", str(examples), "--finetune-test", str(examples),
             "--finetune-seeds", "1", "--finetune-epochs", "2", "--finetune-max-length", "32"]
    trained = {r["seed"]: (out / r["run_dir"] / "train.log").stat().st_mtime_ns for r in rows}
    proc = _sweep(again)
    assert proc.returncode == 0 and proc.stdout.count("scored with other test shards, evaluation or fine-tuning") == 2
    assert f"warning: {out / 'unigram.json'} was scored with other test shards, evaluation or unigram shards; " \
        "--rerun-changed scores it again" in proc.stdout
    assert sorted(result_rows(out), key=lambda r: r["seed"]) == rows
    proc = _sweep([*again, "--rerun-changed"])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.count("score again xpt_sp 300 seed") == 2 and "run xpt_sp" not in proc.stdout
    new = sorted(result_rows(out), key=lambda r: r["seed"])
    for r in new:
        finetune = r["scoring"]["finetune_args"]
        assert r["scoring"]["test_shards"] == valid and finetune[finetune.index("--epochs") + 1] == "2"
        assert (out / r["run_dir"] / "train.log").stat().st_mtime_ns == trained[r["seed"]]
        assert json.loads((out / r["run_dir"] / "finetune/results.json").read_text())["config"]["epochs"] == 2
        assert (out / r["run_dir"] / "finetune.superseded/results.json").is_file()
        assert json.loads((out / r["run_dir"] / "eval.json").read_text())["shards"] == valid
    assert json.loads((out / "unigram.json").read_text())["shards"] == valid
    assert json.loads((out / "unigram.json.superseded").read_text())["shards"] == test_shards
    assert f"Intrinsic metrics on masked tokens of `{valid[0]}`" in (out / "results.md").read_text()


def test_overrides_by_method_and_size_range(tmp_path, sweep_config):
    """002 Table A1 changes batch, lr and steps between data-size brackets: --set [METHOD:][SIZES:]key=value."""
    from xpt_ds.config import ConfigError
    from xpt_ds.sweeps.plan import Run, build_plan
    from xpt_ds.cli.sweep import parse_args
    config, test_shards = sweep_config
    base = ["--config", str(config), "--methods", "xpt", "scratch", "--sizes", "100", "400", "1.6K", "--out",
            str(tmp_path / "sweep"), "--test-shards", *test_shards]
    plan = build_plan(parse_args([*base, "--set", "optim.micro_batch_size=2", "400..:phases.0.steps=5",
                                  "xpt:..400:phases.0.lr=1e-4", "scratch:1.6K:optim.grad_accum=3"]))
    args = {(m, s): plan.train_args(Run(m, s)) for m in plan.methods for s in plan.sizes}
    assert all("--optim.micro_batch_size=2" in a for a in args.values())
    assert [s for s in plan.sizes if "--phases.0.steps=5" in args["xpt", s]] == [400, 1600]
    assert [s for s in plan.sizes if "--phases.0.lr=1e-4" in args["xpt", s]] == [100, 400]
    assert not any("--phases.0.lr=1e-4" in args["scratch", s] for s in plan.sizes)
    assert [k for k, a in args.items() if "--optim.grad_accum=3" in a] == [("scratch", 1600)]
    # xpt: 2 + 2 steps, phase 1 set to 5 from 400 tokens on; scratch: one phase of 4, set to 5 likewise
    assert plan.steps == {("xpt", 100): 4, ("xpt", 400): 7, ("xpt", 1600): 7,
                          ("scratch", 100): 4, ("scratch", 400): 5, ("scratch", 1600): 5}
    for bad, message in [("100Q:optim.grad_accum=2", "'100Q' is neither an arm"),
                         ("xpt:100:200:optim.grad_accum=2", "at most one arm and one size"),
                         ("100..:data.train_tokens=5", "the sweep sets"), ("optim.grad_accum", "key=value"),
                         ("1.6K..100:optim.grad_accum=2", "the size range 1.6K..100 is reversed"),
                         # a method no arm is, a size or range none of --sizes is in: it would change nothing
                         ("xpt_sp:optim.grad_accum=2", "applies to no run of this sweep"),
                         ("800:optim.grad_accum=2", "applies to no run"), ("2K..:optim.grad_accum=2", "to no run"),
                         ("scratch:150..300:optim.grad_accum=2", "applies to no run")]:
        with pytest.raises(ConfigError, match=message):
            build_plan(parse_args([*base, "--set", bad]))
    with pytest.raises(ConfigError, match="optim.no_such_key"):  # checked for every size before any run
        build_plan(parse_args([*base, "--set", "1.6K:optim.no_such_key=1"]))
    with pytest.raises(ConfigError, match=r"^arm 'scratch' \(model.method scratch\), size 100: .*phases"):
        build_plan(parse_args([*base, "--set", "phases.1.steps=3"]))  # scratch has one phase


def test_a_negative_deadline_is_a_usage_error(capsys):
    """--deadline-minutes -5 started no run and exited 0; now a usage error (0 is no deadline)."""
    from xpt_ds.cli.sweep import parse_args
    with pytest.raises(SystemExit) as e:
        parse_args(["--config", "c.yaml", "--methods", "xpt", "--sizes", "100", "--out", "o", "--deadline-minutes",
                    "-5"])
    assert e.value.code == 2 and "--deadline-minutes must be >= 0 (0 = none), got -5.0" in capsys.readouterr().err
    assert parse_args(["--config", "c.yaml", "--methods", "xpt", "--sizes", "100", "--out", "o"]).deadline_minutes == 0


def test_labelled_arms_and_seeds_plan_their_own_runs(tmp_path, sweep_config):
    """LABEL=METHOD arms (issue 22's embedding starts) take --set LABEL:... alone, and a method's name reaches every
    arm of it; --seeds gives each run its replicates, in their own directories."""
    from xpt_ds.config import ConfigError
    from xpt_ds.sweeps.plan import Run, build_plan
    from xpt_ds.cli.sweep import parse_args
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    base = ["--config", str(config), "--sizes", "100", "400", "--out", str(out), "--test-shards", *test_shards]
    labels = tmp_path / "labels.jsonl"  # the plan reads the fine-tuning files as finetune would
    labels.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": "y"}\n')
    plan = build_plan(parse_args([*base, "--methods", "xpt", "xpt_mean=xpt", "scratch", "--seeds", "1", "2",
                                  "--set", "xpt_mean:model.embedding_init=source_mean", "xpt:optim.grad_accum=3",
                                  "--finetune-train", str(labels), "--finetune-test", str(labels),
                                  "--finetune-sizes", "400"]))
    assert plan.arms == {"xpt": "xpt", "xpt_mean": "xpt", "scratch": "scratch"} and plan.finetune_sizes == {400}
    assert len(plan.runs()) == 12 and plan.runs()[:4] == [Run("xpt", 100, 1), Run("xpt_mean", 100, 1),
                                                                 Run("scratch", 100, 1), Run("xpt", 400, 1)]
    mean = plan.train_args(Run("xpt_mean", 400, 2))
    assert "--model.embedding_init=source_mean" in mean and "--optim.grad_accum=3" in mean  # its label and method
    assert "--model.method=xpt" in mean and f"--config={out}/configs/xpt_mean.yaml" not in mean
    assert {"--model.init_seed=2", "--seed=2", "--data.seed=2"} <= set(mean)
    assert "--model.embedding_init=source_mean" not in plan.train_args(Run("xpt", 400, 2))
    assert not any("grad_accum" in a for a in plan.train_args(Run("scratch", 100, 1)))
    assert plan.run_dir(Run("xpt_mean", 400, 2)) == out / "runs" / "xpt_mean" / "400" / "seed2"
    assert (out / "configs" / "xpt_mean.yaml").is_file() and plan.evaluate_args[-2:] == ["--seed", "0"]
    assert plan.tag_args(Run("xpt", 100, 1)) == []  # keep_best off: the newest checkpoint is scored
    # --largest-first (a GPU session's deadline): the largest size with both seeds, then the rest as before
    first = build_plan(parse_args([*base, "--methods", "xpt", "scratch", "--seeds", "1", "2", "--largest-first"]))
    assert first.runs() == [Run("xpt", 400, 1), Run("scratch", 400, 1), Run("xpt", 400, 2), Run("scratch", 400, 2),
                            Run("xpt", 100, 1), Run("scratch", 100, 1), Run("xpt", 100, 2), Run("scratch", 100, 2)]
    for methods, extra, message in [(["nope=xpt2"], [], "unknown method 'xpt2'"),
                                    (["xpt", "xpt"], [], "'xpt' is given twice"),
                                    (["scratch=xpt"], [], "another method's name"),
                                    (["xpt"], ["--seeds", "1", "--set", "model.init_seed=3"], "--seeds sets"),
                                    (["xpt"], ["--parallel", "2", "--nproc", "2"], "--parallel"),
                                    (["xpt"], ["--finetune-train", "a", "--finetune-test", "b",
                                               "--finetune-sizes", "800"], "not one of --sizes")]:
        with pytest.raises(ConfigError, match=message):
            build_plan(parse_args([*base, "--methods", *methods, *extra]))


def test_one_phase_methods_take_the_lr_of_the_base_phase_that_trains_what_they_train(tmp_path, sweep_config):
    """On a two-phase XPT base (phase 1: new parameters at 1e-3, phase 2: every weight at 5e-4), a one-phase method
    that trains every weight (Scratch, XPT-SP, keep_vocab) gets phase 2's lr and warm-up over both phases' steps;
    Adapters (new parameters only) phase 1's; XPT keeps both phases."""
    from xpt_ds.cli.sweep import parse_args
    from xpt_ds.sweeps.plan import build_plan
    config, test_shards = sweep_config
    cfg = yaml.safe_load(config.read_text())
    cfg["phases"] = [{"name": "phase1", "steps": 2, "lr": 1e-3, "warmup_steps": 1, "min_lr_ratio": 0.1},
                     {"name": "phase2", "steps": 2, "lr": 5e-4, "warmup_steps": 2, "decay": "cosine"}]
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    plan = build_plan(parse_args(["--config", str(config), "--methods", "scratch", "xpt_sp", "adapters", "xpt",
                                  "--sizes", "200", "--out", str(tmp_path / "sweep"), "--test-shards", *test_shards]))
    one = {m: [(p.name, p.steps, p.lr, p.warmup_steps, p.decay, p.min_lr_ratio) for p in _loaded(plan, m, 200).phases]
           for m in ("scratch", "xpt_sp", "adapters")}
    assert one == {"scratch": [("phase1", 4, 5e-4, 2, "cosine", 0.0)],
                   "xpt_sp": [("phase1", 4, 5e-4, 2, "cosine", 0.0)],
                   "adapters": [("phase1", 4, 1e-3, 1, "linear", 0.1)]}
    assert [(p.steps, p.lr) for p in _loaded(plan, "xpt", 200).phases] == [(2, 1e-3), (2, 5e-4)]


def test_size_to_match_interpolates_scratch_in_log_size():
    ppl = [(1600, 4.0), (100, 10.0), (400, 6.0)]  # lower is better; any order
    assert size_to_match(ppl, 8.0, False) == Match("=", pytest.approx(200))  # halfway in log2 from 100 to 400
    assert size_to_match(ppl, 5.0, False) == Match("=", pytest.approx(800))
    assert size_to_match(ppl, 6.0, False) == Match("=", pytest.approx(400))
    assert size_to_match(ppl, 12.0, False) == Match("<=", 100)  # Scratch's smallest size already matches
    assert size_to_match(ppl, 3.0, False) == Match(">", 1600)  # never matches
    mrr = [(100, 0.2), (200, 0.3), (400, 0.25), (800, 0.5), (1600, None)]
    assert size_to_match(mrr, 0.28, True) == Match("=", pytest.approx(100 * 2 ** 0.8))  # the first crossing
    assert size_to_match(mrr, 0.4, True) == Match("=", pytest.approx(400 * 2 ** 0.6))  # after the dip
    assert size_to_match(mrr, 0.6, True).bound == ">"


def test_efficiency_table_from_rows():
    rows = [{"method": "scratch", "size": s, "ppl": p} for s, p in ((100_000, 10.0), (400_000, 6.0), (1_600_000, 4.0))]
    rows += [{"method": "xpt", "size": s, "ppl": p} for s, p in ((100_000, 8.0), (400_000, 5.0), (1_600_000, 3.0))]
    table = efficiency(rows, "ppl", higher_is_better=False)
    assert set(table) == {"xpt"}
    assert table["xpt"][100_000].size == pytest.approx(200_000)
    assert table["xpt"][100_000].text(100_000) == "200K (2×)"
    assert table["xpt"][400_000].text(400_000) == "800K (2×)"
    assert table["xpt"][1_600_000].text(1_600_000) == "> 1.6M (> 1×)"
    assert Match("<=", 100_000).text(400_000) == "≤ 100K (≤ 0.25×)"


def test_sizes_parse_and_label():
    assert [parse_size(s) for s in ("100K", "1.6M", "3.2m", "250000", "2G")] == [100_000, 1_600_000, 3_200_000,
                                                                               250_000, 2 * 10**9]
    assert [size_label(n) for n in (100_000, 1_600_000, 999, 1_234_567)] == ["100K", "1.6M", "999", "1234567"]
    assert size_label(1_234_567, exact=False) == "1.23M"
    for bad in ("1.6Q", "inf", "-infK", "nan"):  # inf was an OverflowError
        with pytest.raises(ValueError, match=f"size '{bad}' is not a number"):
            parse_size(bad)
    assert parse_size("0.2K") == 200


# --- the phase graph (004 Alg. 1) in a sweep ----------------------------------------------------------------

TRELM_DATA = ["trelm:data.source_shards=[en/manifest.json:train]",
              "trelm:data.parallel_shards=[par/manifest.json:train]"]
GRAPH = [[], ["common"], ["common"], ["x_en", "en_x"]]


def _loaded(plan, method, size):
    from xpt_ds.config import load_config
    from xpt_ds.sweeps.plan import Run
    return load_config(str(plan.config_path(method)), plan.train_args(Run(method, size))[2:])


def test_a_trelm_sweep_builds_its_phase_graph_from_an_xpt_base(tmp_path, sweep_config):
    """trelm's preset is 004's graph (common -> two branches -> merge -> language-specific): on a two-phase xpt
    base it gets the graph, sized from the base's total steps, and --set phases.N.* reaches its phases."""
    from xpt_ds.sweeps.plan import build_plan
    from xpt_ds.cli.sweep import parse_args
    config, test_shards = sweep_config  # phase1 2 steps, phase2 2 steps, method xpt
    plan = build_plan(parse_args(["--config", str(config), "--methods", "xpt", "trelm", "scratch", "--sizes", "200",
                                  "--out", str(tmp_path / "sweep"), "--test-shards", *test_shards, "--set",
                                  *TRELM_DATA, "trelm:phases.3.lr=2e-4", "trelm:phases.0.steps=3"]))
    trelm = _loaded(plan, "trelm", 200)
    assert [p.name for p in trelm.phases] == ["common", "en_x", "x_en", "language_specific"]
    assert [p.reads() for p in trelm.phases] == GRAPH
    assert trelm.phases[3].merge.take == {"@lower": "x_en", "@upper": "en_x"}
    assert [p.objectives for p in trelm.phases] == [["mlm_target", "mlm_source"], ["mlm_target", "cdlm_en_x"],
                                                    ["mlm_target", "cdlm_x_en"], ["mlm_target"]]
    assert [p.trainable for p in trelm.phases] == [["@all", "!@encoder"], ["@all", "!@lower"], ["@all", "!@upper"],
                                                   ["@all"]]
    assert [p.steps for p in trelm.phases] == [3, 1, 1, 1] and trelm.phases[3].lr == 2e-4
    # the commonality phase leaves the encoder out: the base's phase-1 lr (new parameters); the rest train it: phase 2's
    assert [p.lr for p in trelm.phases[:3]] == [1e-3, 5e-4, 5e-4]
    assert plan.steps["trelm", 200] == 6 and plan.steps["xpt", 200] == 4 and plan.steps["scratch", 200] == 4
    xpt = _loaded(plan, "xpt", 200)
    assert [p.name for p in xpt.phases] == ["phase1", "phase2"] and not xpt.data.parallel_shards


def test_a_trelm_graph_base_sweeps_every_method(tmp_path, tiny_roberta, corpus):
    """The shipped three-phase TreLM config as the base: trelm keeps its graph (and --set phases.N.* edits it);
    xpt and scratch get their own presets over the same total steps, without the parallel and English data;
    trelm_no_tri gets its graph (English MLM in the branches) with each phase's schedule from the base."""
    from xpt_ds.sweeps.plan import build_plan
    from xpt_ds.cli.sweep import parse_args
    cfg = yaml.safe_load((REPO / "launch/configs/trelm_three_phase.yaml").read_text())
    cfg["model"].update(source=str(tiny_roberta), tokenizer=str(corpus / "spm.model"), adapter_size=16)
    path = write_config(tmp_path / "trelm.yaml", cfg)
    plan = build_plan(parse_args(["--config", str(path), "--methods", "trelm", "xpt", "scratch", "trelm_no_tri",
                                  "--sizes", "1M", "--out", str(tmp_path / "sweep"), "--test-shards",
                                  f"{corpus}/manifest.json:test",
                                  "--set", "trelm:phases.2.lr=1e-5"]))
    trelm = _loaded(plan, "trelm", 10**6)
    assert [p.reads() for p in trelm.phases] == GRAPH and [p.lr for p in trelm.phases] == [3e-5, 3e-5, 1e-5, 2e-5]
    xpt, scratch, no_tri = (_loaded(plan, m, 10**6) for m in ("xpt", "scratch", "trelm_no_tri"))
    assert [(p.name, p.steps, p.trainable, p.objectives, p.reads()) for p in xpt.phases] == [
        ("phase1", 70000, [], [], []), ("phase2", 70000, [], [], [])]
    # Scratch trains every weight: the schedule of the base's last phase (where every weight trains)
    assert [(p.steps, p.lr, p.warmup_steps) for p in scratch.phases] == [(140000, 2e-5, 4000)]
    # the base's source_mean start is every method's but Scratch's, which takes nothing from the source (002 §4.2)
    assert (xpt.model.embedding_init, scratch.model.embedding_init) == ("source_mean", "random")
    for c in (xpt, scratch):  # nor the parallel batch or an adapter width, which the trainer refuses for them
        assert (c.data.parallel_shards, c.data.source_shards, c.data.parallel_valid_shards) == ([], [], [])
        assert (c.data.parallel_micro_batch, c.model.adapter_size) == (0, 64)
    assert trelm.data.parallel_micro_batch == 16
    assert trelm.data.parallel_valid_shards == ["data/en_uk/manifest.json:valid"]
    assert [p.reads() for p in no_tri.phases] == GRAPH and not no_tri.data.parallel_shards
    assert no_tri.data.source_shards and not no_tri.data.parallel_valid_shards
    assert [p.objectives for p in no_tri.phases][1:3] == [["mlm_target", "mlm_source"]] * 2
    assert [(p.steps, p.lr) for p in no_tri.phases] == [(20000, 3e-5)] * 3 + [(80000, 2e-5)]
    assert plan.steps == {(m, 10**6): 140000 for m in ("trelm", "xpt", "scratch", "trelm_no_tri")}


def test_a_trelm_graph_sweep_runs_resumes_and_skips(tmp_path, source_dir, corpus_bert, english):
    """The three TreLM phases (2 steps each) through the sweep: trained, scored, and its row written; a run cut
    inside the x_en branch (its row gone, checkpoints after step 5 lost) trains on from step 5 with the kept phase
    ends to the same scores (test_sweep_trains_evaluates_reports_and_skips_finished_runs skips finished runs)."""
    import shutil
    from trelm_builders import write_parallel
    from trelm_builders import three_phase_config
    from xpt_ds.checkpoint.tags import complete_tags
    parallel, _ = write_parallel(tmp_path / "par", corpus_bert)
    config = three_phase_config(tmp_path / "base", source_dir, corpus_bert, english, parallel, every_steps=5)
    out = tmp_path / "sweep"
    args = ["--config", str(config), "--methods", "trelm", "--sizes", "800", "--out", str(out), "--test-shards",
            f"{corpus_bert}/manifest.json:test", "--eval-batch-size", "4"]
    proc = _sweep(args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    [row] = result_rows(out)
    assert row["steps"] == 8 and 1 <= row["ppl"]
    assert row["epochs"] == pytest.approx(8 * 2 * 2 * 30 / 800)  # target MLM rows only: 8 steps x 2 x 2 x 30
    run = out / "runs" / "trelm" / "800"
    assert (run / "checkpoints" / "phase_ends" / "x_en.safetensors").is_file()

    (out / "results.jsonl").write_text("")  # cut inside x_en: what a killed sweep leaves
    for tag in complete_tags(run / "checkpoints")[-2:]:  # global steps 6 and 8
        shutil.rmtree(run / "checkpoints" / tag)
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**status, "state": "preempted"}))
    again = _sweep(args)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "resumed from global_step000000005" in (run / "train.log").read_text()
    [resumed] = result_rows(out)
    assert {k: resumed[k] for k in ("ppl", "mrr", "loss", "epochs")} == {k: row[k] for k in ("ppl", "mrr", "loss",
                                                                                                "epochs")}


def test_a_decoder_sweep_report_says_what_it_scored(tmp_path):
    """A decoder's rows were scored on every next token (eval.json's objective), not on masked tokens."""
    from xpt_ds.sweeps.report import write_markdown
    from xpt_ds.sweeps.rows import INTRINSIC_KEYS
    rows = [{"method": m, "size": s, "steps": 4, "epochs": 1.0, "train_seconds": 1.0, "wall_seconds": 1.0,
             **{k: 2.0 for k in INTRINSIC_KEYS}, "objective": "next_token"}
            for m in ("xpt", "scratch") for s in (200, 800)]
    write_markdown(tmp_path, rows, [])
    assert "Intrinsic metrics on every next token of the test shards" in (tmp_path / "results.md").read_text()
    write_markdown(tmp_path, [{k: v for k, v in r.items() if k != "objective"} for r in rows], [])
    assert "Intrinsic metrics on masked tokens of the test shards" in (tmp_path / "results.md").read_text()
