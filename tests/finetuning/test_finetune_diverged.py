"""A fine-tuning seed whose training loss becomes NaN is left out of the summary and said to have diverged (on
2026-11-28's H200 two of three seeds of one export did, silently, and were scored as one-class guesses); when
every seed diverges the command ends with one error line and results.json still records them. The sweep's row
and its reports count the diverged seeds."""
from __future__ import annotations

import json
import shutil

from safetensors.torch import load_file, save_file

from conftest import run_main
from finetune_builders import FAST, split_files
from xpt_ds.finetuning.metrics import summarize
from xpt_ds.finetuning.report import format_table
from xpt_ds.sweeps.report import _downstream_cell
from xpt_ds.sweeps.rows import downstream_row
from xpt_ds.sweeps.seeds import aggregate

from experiments.uagec.claims import _pm


def _nan_model(xpt_model, out):
    """The export with one NaN in an encoder layer's output LayerNorm weight: every forward pass is NaN."""
    shutil.copytree(xpt_model, out)
    weights = load_file(out / "model.safetensors")
    name = next(k for k in weights if k.endswith("output.LayerNorm.weight"))
    weights[name][0] = float("nan")
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return out


def test_every_seed_diverging_is_one_error_line_and_results_json_keeps_them(xpt_model, tmp_path):
    model = _nan_model(xpt_model, tmp_path / "nan_model")
    rows = [{"text": f"w{i % 7} w{i % 5}", "label": "yes" if i % 3 else "no"} for i in range(60)]
    files = split_files(rows, tmp_path / "data")
    out = tmp_path / "out"
    args = ["--model", str(model), "--out", str(out), "--seeds", "1", "2"]
    for k, v in {**files, **FAST, "epochs": 2}.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    proc = run_main("xpt_ds.cli.finetune", args, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert errors[0].startswith("error: every seed's training loss became NaN or infinite (seed 1: epoch 1: train "
                                "loss nan at step 1 of 3; seed 2: epoch 1: train loss nan at step 1 of 3)")
    assert "a lower --lr may help" in errors[0]  # the default clips (--grad-clip 1.0) already
    assert "seed 1 diverged in epoch 1 (train loss nan at step 1 of 3): left out of the summary" in proc.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["diverged"] == [1, 2] and res["summary"] == {}
    assert [s["diverged"] for s in res["seeds"]] == ["epoch 1: train loss nan at step 1 of 3"] * 2
    assert all("test" not in s for s in res["seeds"])


def test_a_diverged_seed_is_left_out_of_the_summary_and_counted_in_the_rows():
    """One of three seeds diverged, as results.json records it: the table says so in its column, the sweep row
    pools the two scored seeds and counts the third, and the reports show the count."""
    seeds = [{"seed": 1, "test": {"accuracy": 0.70}}, {"seed": 2, "diverged": "epoch 1: train loss nan at step 9"},
             {"seed": 3, "test": {"accuracy": 0.72}}]
    results = {"seeds": seeds, "summary": summarize([s["test"] for s in seeds if "test" in s]), "diverged": [2],
               "selection": "last epoch", "config": {"task": "classification", "model": "m", "metric": "accuracy"},
               "majority_baseline": {"label": "1", "accuracy": 0.56}}
    line = format_table(results).splitlines()[2]
    assert line.split() == ["accuracy", "70.00", "diverged", "72.00", "71.00", "±", "1.41"]
    row = downstream_row(results)
    assert row["downstream_values"] == [0.70, 0.72] and row["downstream_seeds"] == 2
    assert row["downstream_diverged"] == 1 and abs(row["downstream_std"] - 0.0141421) < 1e-6
    replicate = dict(method="xpt", size=1000, seed=1, **row)
    other = dict(method="xpt", size=1000, seed=2, **downstream_row({**results, "seeds": seeds[:1], "diverged": [],
                                                                    "summary": summarize([seeds[0]["test"]])}))
    folded = aggregate([replicate, other])[0]
    assert folded["downstream_seeds"] == 3 and folded["downstream_diverged"] == 1
    assert _downstream_cell(folded).endswith(" (1 diverged)")
    assert _pm(folded, "downstream_mean", 100).endswith("(n=3, 1 diverged)")
    assert "downstream_diverged" not in downstream_row({**results, "seeds": [seeds[0]], "diverged": []})
    assert abs(folded["downstream_mean"] - (0.70 + 0.72 + 0.70) / 3) < 1e-12  # the three scored seeds, pooled


def test_a_seed_that_diverges_after_a_validated_epoch_is_scored_at_its_best_epoch(xpt_model, tmp_path, monkeypatch):
    """With --valid, the selection already holds an earlier epoch's weights when a later epoch's loss becomes NaN
    (here: one LayerNorm weight set to NaN as epoch 2 starts, and the real loop finds the NaN loss): the seed is
    scored from that epoch, not dropped, and the divergence is recorded beside the score."""
    from xpt_ds.finetuning import run as ft_run
    from xpt_ds.finetuning.config import FinetuneConfig
    import torch
    real = ft_run.train_epoch
    epochs = {}

    def poisoned(model, *args):
        epochs[id(model)] = epochs.get(id(model), 0) + 1
        if epochs[id(model)] == 2 and len(epochs) == 1:  # the first seed's second epoch only
            with torch.no_grad():
                next(m for n, m in model.named_parameters() if n.endswith("output.LayerNorm.weight"))[0] = float("nan")
        return real(model, *args)

    monkeypatch.setattr(ft_run, "train_epoch", poisoned)
    rows = [{"text": f"w{i % 7} w{i % 5}", "label": "yes" if i % 3 else "no"} for i in range(60)]
    files = split_files(rows, tmp_path / "data")
    cfg = FinetuneConfig(model=str(xpt_model), out=str(tmp_path / "out"), seeds=[1, 2], save_model=True,
                         **files, **{**FAST, "epochs": 3})
    res = ft_run.finetune(cfg)
    first, second = res["seeds"]
    assert first["diverged_after"] == "epoch 2: train loss nan at step 1 of 3" and "diverged" not in first
    assert first["epoch"] == 1 and len(first["history"]) == 1 and first["valid"] == first["history"][0]["valid"]
    assert "diverged" not in res and "diverged_after" not in second and len(second["history"]) == 3
    pooled = [first["test"]["accuracy"], second["test"]["accuracy"]]
    assert res["summary"]["accuracy"]["mean"] == sum(pooled) / 2
    saved = load_file(tmp_path / "out" / "model" / "model.safetensors")  # the first seed's scored model
    assert all(bool(t.isfinite().all()) for t in saved.values() if t.is_floating_point())
    table = format_table(json.loads((tmp_path / "out" / "results.json").read_text()))
    assert "seed 1 diverged in epoch 2: train loss nan at step 1 of 3; scored at its best valid epoch 1" in table
