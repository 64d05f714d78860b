"""experiments.uagec.claims: issue 22's verdicts from sweep rows. A difference counts only when it exceeds the seed
spread, and a missing sweep or arm is 'not measurable', never a verdict."""
import json
import subprocess
import tarfile

from conftest import REPO

from xpt_ds.sweeps.report import write_report
from xpt_ds.sweeps.rows import read_rows

from experiments.uagec.claims import judge, largest_at_smallest, real_gap, write

UNIGRAM = {"ppl": 900.0, "hits@1": 0.06, "mrr": 0.1, "bits_per_char": 3.2, "tokens": 1000}


def _row(method, size, seed, ppl, hits1, accuracy=None):
    row = {"method": method, "size": size, "seed": seed, "steps": 100, "epochs": 1.0, "train_seconds": 1.0,
           "wall_seconds": 1.0, "ppl": ppl, "hits@1": hits1, "hits@3": hits1, "hits@5": hits1, "hits@10": hits1,
           "mrr": hits1, "mr": 10.0, "loss": 1.0, "eval_tokens": 1000, "steps_done": 100}
    if accuracy is not None:
        row.update(downstream_metric="accuracy", downstream_mean=accuracy, downstream_std=0.0, downstream_seeds=1,
                   downstream_values=[accuracy], majority_accuracy=0.6)
    return row


def _sweep(out, name, rows, report=False):
    """A sweep folder as xpt_ds.cli.sweep leaves it; ``report``: also its summary.json (the efficiency ratios)."""
    d = out / name
    d.mkdir(parents=True)
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "unigram.json").write_text(json.dumps(UNIGRAM))
    if report:
        write_report(d, rows)


def _main_rows(ppl, hits, spread, small_scratch_hits=0.061):
    """Every TABLE2 arm at 10K and 80K tokens, two seeds each, means ``ppl``/``hits`` at 80K, +-``spread``."""
    rows = []
    for method in ppl:
        for seed, sign in ((1, -1), (2, 1)):
            rows.append(_row(method, 80_000, seed, ppl[method] + sign * spread, hits[method], 0.7))
            small_hits = small_scratch_hits if method == "scratch" else 0.2
            rows.append(_row(method, 10_000, seed, 2 * ppl[method] + sign * spread, small_hits))
    return rows


def test_a_clear_order_is_reproduced_and_every_claim_gets_a_verdict(tmp_path):
    ppl = {"scratch": 400.0, "adapters": 300.0, "xpt_sp": 200.0, "xpt": 100.0}
    hits = {"scratch": 0.13, "adapters": 0.15, "xpt_sp": 0.2, "xpt": 0.25}
    _sweep(tmp_path, "main", _main_rows(ppl, hits, spread=5.0), report=True)
    _sweep(tmp_path, "init", [_row("xpt_source_mean", 80_000, s, 60.0 + s, 0.3) for s in (1, 2)])
    result = write(tmp_path)
    claims = result["claims"]
    table2 = next(v for k, v in claims.items() if k.startswith("002 Table 2"))
    assert table2["verdict"] == "reproduced"
    unigram = next(v for k, v in claims.items() if "twice the unigram" in k)
    assert unigram["verdict"] == "met"  # every arm at the largest size has Hits@1 >= 0.12 = 2 x 0.06
    collapse = next(v for k, v in claims.items() if k.startswith("000 Table 2"))
    assert collapse["verdict"] == "reproduced"  # Scratch at 10K ~ the unigram's Hits@1, XPT 3.3x it
    starts = next(v for k, v in claims.items() if k.startswith("004"))
    assert starts["verdict"] == "reproduced (better than the random start: XPT, source_mean start)"
    assert "XPT, source_mean start PPL 61.5" in starts["evidence"][0]
    efficiency = next(v for k, v in claims.items() if k.startswith("002 Figures"))
    # Scratch at 80K (PPL 400) is worse than XPT at 10K (200): '>' 80K, 8x at 10K; at 80K XPT's 100 is '> 80K', 1x
    assert efficiency["verdict"].startswith("intrinsic: reproduced (at least 8×); largest at the smallest size: not "
                                            "measurable here (at the larger sizes Scratch never reached XPT")
    md = (tmp_path / "claims.md").read_text()
    assert "| *unigram predictor* | 900.00 | 6.00 |" in md and "| *majority class* |" in md
    assert "100.00 ± 7.07 (n=2)" in md  # XPT's PPL: mean and sample std of 95 and 105
    assert "| 70.00 ± 0.00 (n=2) |" in md  # fine-tuned: one fine-tuning seed of each of two replicates, pooled
    # the main sweep's data-efficiency figure and tables (two sizes), before the verdicts
    data = md.index("## Data efficiency (the main sweep")
    assert data < md.index("## Verdicts") and "![PPL against training tokens](efficiency_ppl.png)" in md
    assert (tmp_path / "efficiency_ppl.png").read_bytes() == (tmp_path / "main/plot_ppl.png").read_bytes()
    assert "Scratch data needed to match each method's PPL" in md[data:] and "| XPT | > 80K (> 8×) |" in md[data:]


def test_runs_the_time_budget_cut_short_are_listed(tmp_path):
    ppl = {"scratch": 400.0, "adapters": 300.0, "xpt_sp": 200.0, "xpt": 100.0}
    rows = _main_rows(ppl, {m: 0.2 for m in ppl}, spread=5.0)
    rows[0]["time_stopped"] = ["phase1", "phase2"]  # scratch 80K seed 1
    _sweep(tmp_path, "main", rows, report=True)
    trelm = _row("trelm", 80_000, 2, 150.0, 0.2)
    trelm["time_stopped"] = ["phase3"]
    _sweep(tmp_path, "other_trelm", [trelm])
    result = write(tmp_path)
    assert result["time_stopped"] == ["main: scratch 80K seed 1 (phase1, phase2)",
                                      "other_trelm: trelm 80K seed 2 (phase3)"]
    md = (tmp_path / "claims.md").read_text()
    assert "- main: scratch 80K seed 1 (phase1, phase2)\n- other_trelm: trelm 80K seed 2 (phase3)\n" in md
    efficiency = next(v for k, v in result["claims"].items() if k.startswith("002 Figures"))
    assert ("Scratch at 80K was ended by the time budget, not by its validation loss: the ratios are against what "
            "that budget bought Scratch") in efficiency["evidence"]
    (tmp_path / "main" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))
    result = write(tmp_path)
    assert result["time_stopped"] == ["other_trelm: trelm 80K seed 2 (phase3)"]
    assert not any("time budget" in e for e in next(v for k, v in result["claims"].items()
                                                     if k.startswith("002 Figures"))["evidence"])


def test_differences_inside_the_seed_spread_are_not_called(tmp_path):
    ppl = {"scratch": 400.0, "adapters": 390.0, "xpt_sp": 410.0, "xpt": 380.0}
    hits = {m: 0.1 for m in ppl}
    _sweep(tmp_path, "main", _main_rows(ppl, hits, spread=20.0, small_scratch_hits=0.2))
    claims = judge(tmp_path)["claims"]
    table2 = next(v for k, v in claims.items() if k.startswith("002 Table 2"))
    assert table2["verdict"] == "not measurable here"
    assert any("within the seed spread" in e for e in table2["evidence"])
    assert next(v for k, v in claims.items() if "twice the unigram" in k)["verdict"] == "not met"
    assert next(v for k, v in claims.items() if k.startswith("004"))["verdict"].startswith("not measurable")


def test_a_gap_counts_only_beyond_both_spreads():
    a, b = {"ppl": 100.0, "ppl_std": 1.0}, {"ppl": 200.0, "ppl_std": 1.0}
    assert real_gap(a, b, "ppl") == -100.0 and real_gap(a, {"ppl": 101.5, "ppl_std": 1.0}, "ppl") is None
    assert real_gap({"ppl": 100.0}, b, "ppl") is None  # one seed: no spread, no call


def test_reversed_and_missing_arms(tmp_path):
    ppl = {"scratch": 100.0, "adapters": 200.0, "xpt_sp": 300.0, "xpt": 400.0}
    _sweep(tmp_path / "a", "main", _main_rows(ppl, {m: 0.1 for m in ppl}, spread=1.0))
    assert next(v for k, v in judge(tmp_path / "a")["claims"].items()
                if k.startswith("002 Table 2"))["verdict"].startswith("PPL: not reproduced")
    rows = [r for r in _main_rows(ppl, {m: 0.1 for m in ppl}, 1.0) if r["method"] in ("scratch", "xpt")]
    _sweep(tmp_path / "b", "main", rows)
    claims = judge(tmp_path / "b")["claims"]
    table2 = next(v for k, v in claims.items() if k.startswith("002 Table 2"))
    assert "arms missing: adapters, xpt_sp" in table2["verdict"]
    assert judge(tmp_path / "nothing") == {"claims": {}, "note": "no finished run in OUT/main"}


def test_pack_reports_what_finished_of_a_session_cut_short(tmp_path):
    """``launch/gpu_uagec.sh OUT --pack`` mid-session: the main sweep still running (no line in steps.tsv, a row
    half appended) gets its report from the rows so far, without TensorBoard scalars; the finished pilot keeps
    its own report; claims.md and results.tgz follow, without weights."""
    ppl = {"scratch": 400.0, "adapters": 300.0, "xpt_sp": 200.0, "xpt": 100.0}
    rows = _main_rows(ppl, {m: 0.2 for m in ppl}, spread=5.0)
    _sweep(tmp_path, "main", rows)
    with open(tmp_path / "main/results.jsonl", "a") as f:
        f.write('{"method": "xpt", "size": 160000, "se')  # the runner's next row, half written
    _sweep(tmp_path, "pilot", rows[:2], report=True)
    (tmp_path / "pilot/results.md").write_text("the pilot's own report\n")
    (tmp_path / "steps.tsv").write_text("unpack\t0\t1\npilot\t0\t60\n")
    (tmp_path / "main/runs/xpt/80K/seed1/checkpoints").mkdir(parents=True)
    (tmp_path / "main/runs/xpt/80K/seed1/checkpoints/weights.json").write_text("{}")
    proc = subprocess.run(["bash", str(REPO / "launch/gpu_uagec.sh"), str(tmp_path), "--pack"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(read_rows(tmp_path / "main/results.jsonl")) == len(rows)  # the half-written row left out
    assert "| XPT | **100.00 ± 7.07** |" in (tmp_path / "main/results.md").read_text()  # 80K, two seeds
    assert (tmp_path / "main/summary.json").is_file() and not (tmp_path / "main/tb").exists()
    assert (tmp_path / "pilot/results.md").read_text() == "the pilot's own report\n"
    assert "002 Table 2" in (tmp_path / "claims.md").read_text()
    with tarfile.open(tmp_path / "results.tgz") as tar:
        names = set(tar.getnames())
    assert {"./claims.md", "./main/results.md", "./main/results.jsonl", "./steps.tsv"} <= names
    assert not any("checkpoints" in n for n in names)


def test_a_corrupt_sweep_file_is_one_error_line_naming_it(tmp_path, capsys):
    from experiments.uagec.claims import main as claims_main
    from xpt_ds.sweeps.report import main as report_main
    _sweep(tmp_path, "main", [_row("xpt", 80_000, 1, 100.0, 0.2)])
    (tmp_path / "main/summary.json").write_text("{cut")
    assert claims_main(["--out", str(tmp_path / "none")]) == 2
    missing = f"error: --out {tmp_path / 'none'}: no such directory (launch/gpu_uagec.sh's OUT)\n"
    assert capsys.readouterr().err == missing
    assert claims_main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'main/summary.json'}: not valid JSON") and err.count("\n") == 1
    with open(tmp_path / "main/results.jsonl", "a") as f:
        f.write("{not json}\n")
    assert report_main([str(tmp_path / "main")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'main/results.jsonl'}:2: not a JSON row")


def test_a_session_cut_short_judges_what_it_has(tmp_path):
    """The first GPU session's shape (2026-11-27): every arm at the largest size, only Scratch at a smaller one.
    The collapse claim is judged where both Scratch and XPT ran; Scratch never reaching XPT bounds the data ratio
    from below only (1x at the one size), which decides nothing; one size cannot say where the ratio is largest."""
    ppl = {"scratch": 1100.0, "adapters": 64.0, "xpt_sp": 1090.0, "xpt": 75.0}
    rows = [r for r in _main_rows(ppl, {"scratch": 0.059, "adapters": 0.28, "xpt_sp": 0.059, "xpt": 0.27}, 2.0,
                                  small_scratch_hits=0.059) if r["size"] == 80_000 or r["method"] == "scratch"]
    _sweep(tmp_path, "main", rows, report=True)
    claims = judge(tmp_path)["claims"]
    collapse = next(v for k, v in claims.items() if k.startswith("000 Table 2"))
    assert collapse["verdict"] == "reproduced" and collapse["evidence"][0].startswith("at 80K tokens")
    efficiency = next(v for k, v in claims.items() if k.startswith("002 Figures"))["verdict"]
    assert efficiency.startswith("intrinsic: not measurable here (Scratch did not reach XPT's value at any size run: "
                                 "at least 1×, a lower bound); largest at the smallest size: not measurable here "
                                 "(one size)"), efficiency
    write(tmp_path)
    assert not (tmp_path / "valid_curves.png").exists() and "valid_curves" not in (tmp_path / "claims.md").read_text()
    for method, seed in (("xpt", 1), ("xpt", 2), ("scratch", 1)):  # validation rows as the trainer logs them
        run = tmp_path / "main" / "runs" / method / "80K" / f"seed{seed}"
        run.mkdir(parents=True)
        run.joinpath("metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "valid/bits_per_char": 3.0 - s / 1000}) + "\n" for s in (100, 200)))
    write(tmp_path)
    assert (tmp_path / "valid_curves.png").stat().st_size > 10_000
    assert "![validation curves](valid_curves.png)" in (tmp_path / "claims.md").read_text()


def test_the_second_sessions_shape_names_what_decides_each_verdict(tmp_path):
    """The 2026-11-28 shape: Scratch leaves the unigram predictor at every size (one seed at the small one), one
    start worse than the random start beyond the spread, one better, one with a single seed. The collapse claim is
    then not reproduced, and says why; the starts claim names the direction of each start that counts."""
    ppl = {"scratch": 550.0, "adapters": 64.0, "xpt_sp": 87.0, "xpt": 75.0}
    rows = _main_rows(ppl, {"scratch": 0.14, "adapters": 0.28, "xpt_sp": 0.25, "xpt": 0.27}, 1.0,
                      small_scratch_hits=0.13)
    _sweep(tmp_path / "a", "main", [r for r in rows if r["size"] == 80_000 or r["seed"] == 1])
    starts = [_row("xpt_source_mean", 80_000, s, 100.0 + s, 0.24) for s in (1, 2)]
    starts += [_row("xpt_from_file", 80_000, s, 60.0 + s, 0.28) for s in (1, 2)] + [
        _row("xpt_frequency_rank", 80_000, 1, 89.0, 0.25)]
    _sweep(tmp_path / "a", "init", starts)
    claims = judge(tmp_path / "a")["claims"]
    collapse = next(v for k, v in claims.items() if k.startswith("000 Table 2"))["verdict"]
    assert collapse == ("not reproduced: Scratch does not collapse to the unigram predictor (Hits@1 2.17× its; "
                        "PPL: one seed, no spread to judge by)")
    verdict, evidence = (lambda c: (c["verdict"], c["evidence"]))(
        next(v for k, v in claims.items() if k.startswith("004")))
    assert verdict == ("reproduced (better than the random start: XPT, from_file start; worse than the random "
                       "start: XPT, source_mean start)")
    assert "XPT, frequency_rank start PPL 89 vs random 75: one seed, no spread to judge by" in evidence
    _sweep(tmp_path / "b", "main", rows)  # both seeds at 10K: the PPL gap beside the verdict counts
    collapse = next(v for k, v in judge(tmp_path / "b")["claims"].items() if k.startswith("000 Table 2"))
    assert collapse["verdict"].endswith("(Hits@1 2.17× its; PPL: XPT's PPL lower by more than the seed spread)")
    xpt_flat = [dict(r, **{"hits@1": 0.07}) if r["method"] == "xpt" else dict(r, **{"hits@1": 0.06})
                if r["method"] == "scratch" else r for r in rows]
    _sweep(tmp_path / "c", "main", xpt_flat)
    collapse = next(v for k, v in judge(tmp_path / "c")["claims"].items() if k.startswith("000 Table 2"))
    assert collapse["verdict"] == "not reproduced: XPT stays near the unigram predictor too"


def test_the_size_tables_show_the_steps_the_runs_took_not_the_plan(tmp_path):
    """A time budget or early stopping ends runs before their planned steps: the report's 'steps run' is the
    seeds' mean of what they took, beside the plan; a row from before ``steps_done`` was recorded shows the plan."""
    rows = [dict(_row("xpt", 80_000, 1, 100.0, 0.2), steps_done=60), dict(_row("xpt", 80_000, 2, 101.0, 0.2),
                                                                          steps_done=81)]
    old = _row("scratch", 80_000, 1, 400.0, 0.1)
    del old["steps_done"]
    _sweep(tmp_path, "main", rows + [old], report=True)
    md = (tmp_path / "main/results.md").read_text()
    assert "| steps run | epochs | train s | seeds |" in md
    assert md.split("| XPT |")[1].splitlines()[0].endswith("| 70.5 of 100 | 1.0 | 1 | 2 |")  # (60 + 81) / 2
    assert md.split("| Scratch |")[1].splitlines()[0].endswith("| 100 | 1.0 | 1 | 1 |")


def test_the_rewind_sweep_is_shown_beside_xpt_at_its_sizes(tmp_path):
    """The rewind sweep (XPT with guard.early_stop_rewind at the two smallest sizes) gets its own section: its rows
    beside main's XPT and XPT-SP at each of its sizes, and its PPL gap to XPT, called only beyond the spread."""
    ppl = {"scratch": 400.0, "adapters": 300.0, "xpt_sp": 200.0, "xpt": 250.0}
    _sweep(tmp_path, "main", _main_rows(ppl, {m: 0.2 for m in ppl}, spread=1.0))
    md = write(tmp_path) and (tmp_path / "claims.md").read_text()
    assert "rewind sweep" not in md  # no rows, no section
    rows = [_row("xpt_rewind", 10_000, s, 380.0 + s, 0.22, 0.7) for s in (1, 2)]  # main's XPT at 10K: 500 +- 1
    rows += [_row("xpt_rewind", 80_000, 1, 240.0, 0.22)]
    _sweep(tmp_path, "rewind", rows)
    logs = tmp_path / "rewind/runs/xpt_rewind/10K"  # which runs rewound: their train.log says so
    for seed, text in (("seed1", "x\nthe next phase starts from the best checkpoint global_step000000009 (step 9"),
                       ("seed2", "time budget: phase 'phase1' ends at its step 10\n"),
                       ("seed2.superseded", "the next phase starts from the best checkpoint")):
        (logs / seed).mkdir(parents=True)
        (logs / seed / "train.log").write_text(text)
    md = (write(tmp_path) and (tmp_path / "claims.md").read_text()).split("## XPT's phase hand-over")[1]
    table = [line for line in md.splitlines() if line.startswith("| 10K")]
    assert [line.split(" | ")[1] for line in table] == [
        "XPT, phase 2 from phase 1's best (guard.early_stop_rewind)", "XPT (random start)", "XPT-SP"]
    assert "| 381.50 ± 0.71 (n=2) |" in table[0]
    assert table[0].endswith("| 1 of 2 |") and table[1].endswith("| – |")
    assert next(line for line in md.splitlines() if line.startswith("| 80K")).endswith("| – |")  # no logs
    assert "- at 10K: PPL 381.5 against XPT's 500: -118.5" in md
    assert "- at 80K: PPL 240 against XPT's 250: one seed, no spread to judge by" in md
    assert md.index("## Verdicts") > 0


def test_where_the_ratio_is_largest_needs_exact_ratios_beyond_the_smallest_size():
    """A '>' ratio is a lower bound: it can make the smallest size's ratio the larger only against exact ones."""
    def sizes(*pairs):
        return [(i, {"bound": b, "ratio": r}) for i, (b, r) in enumerate(pairs)]
    assert largest_at_smallest(sizes(("=", 6.0), ("=", 3.0), ("=", 2.0))) == "yes"
    assert largest_at_smallest(sizes((">", 8.0), ("=", 3.0))) == "yes"  # at least 8 against exactly 3
    assert largest_at_smallest(sizes(("=", 3.0), (">", 4.0))) == "no"  # exactly 3 against at least 4
    assert largest_at_smallest(sizes(("=", 3.0), ("=", 5.0))) == "no"
    assert largest_at_smallest(sizes((">", 8.0), (">", 4.0), (">", 1.0))).startswith("not measurable here (at the")
    assert largest_at_smallest(sizes(("=", 5.0), (">", 4.0))).startswith("not measurable here")  # 4 may be more
    assert largest_at_smallest(sizes(("=", 5.0), ("<", 0.5))) == "not measurable here (one size)"


def test_the_arms_are_also_compared_at_the_last_step_every_run_validated_at(tmp_path):
    """A time budget ends runs at different steps (2026-11-28: XPT 2,396-2,601, XPT-SP 1,860-1,868): claims.md
    adds each arm's validation bits per character at the last step that every run at the largest size has."""
    ppl = {"scratch": 400.0, "adapters": 300.0, "xpt_sp": 200.0, "xpt": 100.0}
    _sweep(tmp_path, "main", _main_rows(ppl, {m: 0.2 for m in ppl}, spread=1.0))
    curves = {("xpt", 1): {100: 3.0, 200: 2.5, 250: 2.4}, ("xpt", 2): {100: 3.1, 200: 2.7, 300: 2.2},
              ("scratch", 1): {100: 3.2, 200: 3.0, 237: 2.9}, ("scratch", 2): {100: 3.2, 200: 3.1, 300: 2.9}}
    for (method, seed), points in curves.items():
        run = tmp_path / "main" / "runs" / method / "80K" / f"seed{seed}"
        run.mkdir(parents=True)
        run.joinpath("metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "valid/bits_per_char": v}) + "\n" for s, v in points.items()))
    superseded = tmp_path / "main/runs/xpt/80K/seed1.superseded"  # a replaced run is not one of the arm's
    superseded.mkdir()
    superseded.joinpath("metrics.jsonl").write_text(json.dumps({"step": 100, "valid/bits_per_char": 9.0}) + "\n")
    write(tmp_path)
    md = (tmp_path / "claims.md").read_text()
    table = md.split("Validation bits per character at step 200, the last step every run at this size validated")[1]
    rows = [line for line in table.split("\n\n")[1].splitlines() if line.startswith("| ") and "bits/char" not in line]
    assert rows == ["| XPT (random start) | 2.600 ± 0.141 (n=2) |", "| Scratch | 3.050 ± 0.071 (n=2) |"]


def _efficiency_verdict(out, scratch, xpt):
    """The data-efficiency verdict of a main sweep with one seed of Scratch and XPT at the sizes given (size ->
    PPL), through the sweep's report (summary.json's ratios), as the GPU session builds it."""
    rows = [_row(m, size, 1, ppl, 0.1) for m, by_size in (("scratch", scratch), ("xpt", xpt))
            for size, ppl in by_size.items()]
    _sweep(out, "main", rows, report=True)
    return next(v for k, v in judge(out)["claims"].items() if k.startswith("002 Figures"))["verdict"]


def test_an_upper_bound_at_the_smallest_size_is_not_skipped():
    """XPT worse than Scratch at the smallest size: Scratch's smallest size already matches it ('<=', at most 1x),
    so a larger size's exact 1.59x shows the ratio is not largest at the smallest size."""
    def sizes(*pairs):
        return [(i, {"bound": b, "ratio": r}) for i, (b, r) in enumerate(pairs)]
    assert largest_at_smallest(sizes(("<=", 1.0), ("=", 1.59), ("=", 1.32))) == "no"
    assert largest_at_smallest(sizes(("<=", 1.0), (">", 1.5))) == "no"  # at least 1.5 against at most 1
    assert largest_at_smallest(sizes(("=", 3.0), ("<=", 0.25))) == "yes"  # exactly 3 against at most 0.25
    assert largest_at_smallest(sizes(("<=", 1.0), ("=", 0.5))).startswith("not measurable here (at the smallest")


def test_an_upper_bound_at_the_smallest_size_decides_through_the_report(tmp_path):
    verdict = _efficiency_verdict(tmp_path, {10_000: 500.0, 40_000: 300.0, 160_000: 150.0, 640_000: 100.0,
                                             2_560_000: 80.0},
                                  {10_000: 600.0, 40_000: 250.0, 160_000: 140.0, 640_000: 98.0})
    assert "; largest at the smallest size: no;" in verdict, verdict


def test_a_lower_bound_at_one_size_does_not_say_scratch_never_reached_xpt(tmp_path):
    """Scratch reaches XPT's PPL at 10K-160K (at most 1.59x) but not at 640K (at least 1x): the verdict names the
    size it did not reach, not 'any size run'."""
    verdict = _efficiency_verdict(tmp_path, {10_000: 500.0, 40_000: 300.0, 160_000: 150.0, 640_000: 100.0},
                                  {10_000: 600.0, 40_000: 250.0, 160_000: 140.0, 640_000: 90.0})
    assert verdict.startswith("intrinsic: not measurable here (Scratch did not reach XPT's value at 640K: at least "
                              "1×, a lower bound; at most 1.59× where it did);"), verdict


def test_the_starts_are_not_judged_without_the_random_start(tmp_path):
    """main's XPT (the random start) missing at the largest size: no informed start stands in for it."""
    ppl = {"scratch": 400.0, "adapters": 300.0, "xpt_sp": 200.0}
    _sweep(tmp_path, "main", _main_rows(ppl, {m: 0.2 for m in ppl}, spread=1.0))
    _sweep(tmp_path, "init", [_row(m, 80_000, s, p + s, 0.3) for m, p in (
        ("xpt_source_mean", 60.0), ("xpt_frequency_rank", 90.0), ("xpt_from_file", 40.0)) for s in (1, 2)])
    starts = next(v for k, v in judge(tmp_path)["claims"].items() if k.startswith("004"))
    assert starts == {"verdict": "not measurable here (the random start, main's XPT, missing)", "evidence": []}


def test_claims_md_says_why_it_has_no_verdicts(tmp_path):
    """Only the starts and TreLM sweeps finished: claims.md carries claims.json's note, not an empty list."""
    _sweep(tmp_path, "init", [_row("xpt_source_mean", 600_000, s, 90.0 + s, 0.3) for s in (1, 2)])
    assert write(tmp_path)["note"] == "no finished run in OUT/main"
    md = (tmp_path / "claims.md").read_text()
    assert md.endswith("## Verdicts\n\nNo verdicts: no finished run in OUT/main.\n\n"), md
