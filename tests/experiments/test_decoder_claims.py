"""experiments.decoder.claims: issue 57's verdicts from synthetic session folders. XPT (the better of its two starts)
against each rival on Ukrainian bits per byte, a difference counted only beyond the summed seed spreads, one seed
no call, a missing arm 'not measured'; English cost against the source's one value; sizes aligned across sweeps
by their index in sizes.json, never by the raw size."""
import json

import pytest

from experiments.decoder.claims import main, write

SIZES = {"fractions": [0.25, 0.5, 1.0], "sweeps": {"target": [150_000, 300_000, 600_000],
                                                    "keep_vocab": [210_000, 420_000, 840_000],
                                                    "extend": [180_000, 360_000, 720_000]}}
SOURCE = {"en": {"bits_per_byte": 1.0, "pieces_per_word": 1.3, "tokens": 1000, "bytes": 5000},
          "uk": {"bits_per_byte": 3.0, "pieces_per_word": 4.0, "tokens": 2000, "bytes": 6000}}
UNIGRAM = {"loss": 6.0, "ppl": 400.0, "hits@1": 0.05, "bits_per_char": 2.5, "bits_per_byte": 4.25}


def _run(method, size, seed, uk=None, en=None, base_method=None, **extra):
    """One finished run's row; ``uk``/``en``: its text scores' bits per byte (None: a row without ``text``)."""
    row = {"method": method, "base_method": base_method or method, "size": size, "size_label": str(size),
           "seed": seed, "steps": 100, "steps_done": 100, "epochs": 1.0, "loss": 2.0, "ppl": 7.4, "hits@1": 0.3,
           "train_seconds": 10.0, "wall_seconds": 12.0, "tokens_seen": 1000, **extra}
    if uk is not None:
        row["text"] = {"uk": {"bits_per_byte": uk, "pieces_per_word": 2.0, "tokens": 3000, "bytes": 6000},
                       "en": {"bits_per_byte": en, "pieces_per_word": 1.5, "tokens": 1200, "bytes": 5000}}
    return row


def _pair(method, size, uk, en, uk_spread, en_spread, **extra):
    """Two seeds whose means are ``uk``/``en`` and whose sample std is ``spread`` × sqrt(2)."""
    return [_run(method, size, seed, uk + sign * uk_spread, en + sign * en_spread, **extra)
            for seed, sign in ((1, -1), (2, 1))]


def _session(out, sweeps, sizes=SIZES, source=SOURCE, unigram=UNIGRAM):
    """A session folder as the issue-57 script leaves it: per sweep its results.jsonl, unigram.json and
    source_text.json (None: that file left out), and OUT/sizes.json."""
    for name, rows in sweeps.items():
        (out / name).mkdir(parents=True)
        (out / name / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if unigram is not None:
            (out / name / "unigram.json").write_text(json.dumps(unigram))
        if source is not None:
            (out / name / "source_text.json").write_text(json.dumps(source))
    if sizes is not None:
        (out / "sizes.json").write_text(json.dumps(sizes))


def _largest_target():
    return (_pair("xpt", 600_000, 1.50, 1.30, 0.01, 0.01)
            + _pair("xpt_subword_mean", 600_000, 1.40, 1.20, 0.01, 0.01, base_method="xpt")
            + _pair("lora", 600_000, 1.80, 1.02, 0.01, 0.01))


def test_xpt_against_each_rival_and_what_each_costs_english(tmp_path):
    extend = _pair("extend", 720_000, 1.45, 1.02, 0.05, 0.02)
    for run, layers in zip(extend, (1.10, 1.30)):  # the sweep's --probe-text en: the layers alone
        run["text"]["en_probe"] = {"bits_per_byte": layers, "pieces_per_word": 1.5, "tokens": 1200, "bytes": 5000}
    _session(tmp_path, {"target": _largest_target(), "extend": extend})
    result = write(tmp_path)
    (top,) = result["by_size"]
    # every sweep of sizes.json is named in the title, also one that did not run (keep_vocab)
    assert top["title"] == "100 % of the corpus (600K target pieces; keep_vocab 840K, extend 720K pieces)"
    lora, extend, keep = top["verdicts"].values()
    # the better start (subword_mean, 1.40 < 1.50) is the one judged, and named
    assert lora["verdict"] == "yes" and lora["xpt_arm"] == extend["xpt_arm"] == "xpt_subword_mean"
    assert lora["difference"] == pytest.approx(-0.40) and lora["beyond_spread"]
    assert extend["verdict"] == "no call" and "within the seed spread" in extend["text"]  # 0.05 < 0.014 + 0.071
    assert extend["difference"] == pytest.approx(-0.05) and not extend["beyond_spread"]
    assert keep == {"verdict": "not measured", "text": "keep_vocab missing"}
    cost = top["english_cost"]
    assert cost["lora"]["verdict"] == "costs English" and cost["lora"]["cost"] == pytest.approx(0.02)  # > 0.0141
    assert cost["extend"]["verdict"] == "no call" and cost["extend"]["cost"] == pytest.approx(0.02)  # < 0.0283
    assert cost["xpt_subword_mean"]["verdict"] == "costs English"
    arm = top["arms"]["xpt_subword_mean"]
    assert arm["uk_bpb"] == pytest.approx(1.40) and arm["uk_bpb_std"] == pytest.approx(0.02 ** 0.5 / 10)
    assert arm["uk_bpb_n"] == 2 and arm["en_cost"] == pytest.approx(0.20) and arm["tokens_per_s"] == 100
    assert top["arms"]["extend"]["sweep"] == "extend" and top["arms"]["extend"]["size"] == 720_000
    assert top["arms"]["extend"]["en_layers_bpb"] == pytest.approx(1.20) and "en_layers_bpb" not in arm
    assert result["headline"]["title"] == top["title"] and result["headline"]["verdicts"] == top["verdicts"]
    md = (tmp_path / "claims.md").read_text()
    assert "- missing: keep_vocab/, sizes.json" not in md and "- missing: keep_vocab/" in md
    assert ("**does XPT beat LoRA: yes.** XPT, subword_mean start 1.4000 ± 0.0141 (n=2) against LoRA "
            "1.8000 ± 0.0141 (n=2) Ukrainian bits per byte, -0.4000: beyond the summed seed spread (0.0283)") in md
    assert "**does XPT beat continued pretraining (keep_vocab): not measured.** keep_vocab missing" in md
    assert "LoRA: +0.0200 ± 0.0141 (n=2) English bits per byte over the source's 1.0000: costs English" in md
    assert "| *source (untouched)* | target | 3.0000 | 1.0000 | (reference) | 1.0000 | 4.00 | – | – | – |" in md
    assert "| +0.0200 ± 0.0283 | 1.2000 ± 0.1414 (n=2) | 2.00 ± 0.00 |" in md
    assert "| en bits/byte, layers (probe) |" in md
    assert "| *unigram predictor* | extend | 4.2500 (on extend's test shards) |" in md
    assert md.index("## Verdicts by size") < md.index("## Headline") and "![" in md
    assert (tmp_path / "plot_retention.png").stat().st_size > 0
    assert json.loads((tmp_path / "claims.json").read_text())["plot"] == "plot_retention.png"


def test_sizes_are_aligned_by_their_index_in_each_sweep_not_by_the_raw_size(tmp_path):
    target = (_pair("xpt", 150_000, 2.00, 1.1, 0.01, 0.01)
              + _pair("xpt_subword_mean", 150_000, 2.20, 1.1, 0.01, 0.01) + _pair("lora", 150_000, 2.5, 1.0, 0.01, 0)
              + _pair("xpt", 300_000, 1.80, 1.1, 0.01, 0.01))
    keep = (_pair("keep_vocab", 210_000, 2.6, 1.05, 0.01, 0.01) + _pair("keep_vocab", 420_000, 1.5, 1.05, 0.01, 0.01)
            + [_run("keep_vocab", 300_000, 1, 1.0, 1.0)])  # target's 300K, but no keep_vocab size of sizes.json
    sizes = {**SIZES, "sweeps": {**SIZES["sweeps"], "keep_vocab": [210_000.0, 420_000.0, 840_000.0]}}  # as sizes.py
    _session(tmp_path, {"target": target, "keep_vocab": keep}, sizes=sizes)
    result = write(tmp_path)
    small, middle = result["by_size"]
    assert small["title"] == "25 % of the corpus (150K target pieces; keep_vocab 210K, extend 180K pieces)"
    assert small["arms"]["keep_vocab"]["size"] == 210_000 and middle["arms"]["keep_vocab"]["size"] == 420_000
    assert middle["arms"]["keep_vocab"]["uk_bpb"] == pytest.approx(1.5)  # the 300K stray row is not folded in
    assert result["unaligned"] == ["keep_vocab: keep_vocab 300K seed 1"]
    # at 25 % the random start is the better one (2.00 < 2.20), and XPT beats keep_vocab there ...
    assert small["verdicts"]["does XPT beat LoRA"]["xpt_arm"] == "xpt"
    assert small["verdicts"]["does XPT beat continued pretraining (keep_vocab)"]["verdict"] == "yes"
    # ... and loses to it at 50 %, the largest size present: the headline
    kv = middle["verdicts"]["does XPT beat continued pretraining (keep_vocab)"]
    assert kv["verdict"] == "no" and kv["difference"] == pytest.approx(0.30)
    assert middle["verdicts"]["does XPT beat LoRA"]["text"] == "lora missing"
    assert result["headline"]["index"] == 1 and "not_run" in result["headline"]
    assert result["plan"]["keep_vocab"] == [210_000, 420_000, 840_000]
    md = (tmp_path / "claims.md").read_text()
    assert "At 50 % of the corpus (300K target pieces; keep_vocab 420K, extend 360K pieces), the largest" in md
    assert "runs whose size is not in their sweep's list of sizes.json (left out): keep_vocab: keep_vocab 300K" in md
    assert "- missing: extend/" in md


def test_an_arm_with_one_seed_makes_no_call(tmp_path):
    target = (_pair("xpt", 600_000, 1.5, 1.3, 0.01, 0.01) + [_run("lora", 600_000, 1, 2.5, 1.3)]
              + [_run("xpt_sp", 600_000, 1, 1.6, 1.4), _run("xpt_sp", 600_000, 2)])  # seed 2 unscored
    _session(tmp_path, {"target": target})
    (top,) = write(tmp_path)["by_size"]
    lora = top["verdicts"]["does XPT beat LoRA"]
    assert lora["verdict"] == "no call" and lora["text"].endswith("-1.0000: one seed, no spread to judge by")
    assert lora["rival_std"] is None and lora["rival_n"] == 1
    cost = top["english_cost"]
    assert cost["lora"]["verdict"] == "no call" and "one seed, no spread to judge by" in cost["lora"]["text"]
    # two runs, one of them scored: n counts the scored runs, and it is one seed as far as bits per byte go
    assert top["arms"]["xpt_sp"]["seeds"] == 2 and top["arms"]["xpt_sp"]["uk_bpb_n"] == 1
    assert cost["xpt_sp"]["verdict"] == "no call"
    md = (tmp_path / "claims.md").read_text()
    assert "runs without text scores (listed, not judged on bits per byte): target: xpt_sp 600K seed 2" in md


def test_without_text_scores_nothing_is_judged_and_no_plot_is_made(tmp_path):
    _session(tmp_path, {"target": [_run("xpt", 600_000, s) for s in (1, 2)] + [_run("lora", 600_000, 1)]},
             source=None, unigram={"loss": 6.0})
    (tmp_path / "plot_retention.png").write_bytes(b"an earlier session's plot")
    result = write(tmp_path)
    assert not (tmp_path / "plot_retention.png").exists() and result["plot"] is None
    assert result["headline"] is None
    (top,) = result["by_size"]
    assert top["verdicts"]["does XPT beat LoRA"]["text"] == (
        "XPT missing (neither xpt nor xpt_subword_mean has text scores); lora has no text scores")
    assert top["english_cost"]["xpt"]["text"] == "XPT: not measured (no source_text.json)"
    md = (tmp_path / "claims.md").read_text()
    assert "No plot: no run has both text scores." in md
    assert "Not measured: no run has text scores, nothing to judge on bits per byte." in md
    assert "target: xpt 600K seed 1; target: xpt 600K seed 2; target: lora 600K seed 1" in md
    assert "target/source_text.json" in md.split("- missing: ")[1].splitlines()[0]
    assert "*unigram predictor*" not in md and "*source (untouched)*" not in md  # no bits per byte to show


def test_without_sizes_json_the_sizes_align_by_their_order(tmp_path):
    _session(tmp_path, {"target": _pair("xpt", 150_000, 2.0, 1.1, 0.01, 0.01),
                        "extend": _pair("extend", 180_000, 2.5, 1.0, 0.01, 0.01)}, sizes=None)
    (small,) = write(tmp_path)["by_size"]
    assert small["title"] == "training size 1 (150K target pieces; extend 180K pieces)"
    assert small["verdicts"]["does XPT beat vocabulary extension"]["verdict"] == "yes"
    md = (tmp_path / "claims.md").read_text()
    assert "- missing: " in md and "sizes.json" in md.split("- missing: ")[1].splitlines()[0]
    assert "no sizes.json list for target, extend: its sizes are aligned by their order" in md


def test_an_out_without_any_sweep_is_one_error_line_naming_it(tmp_path, capsys):
    (tmp_path / "target").mkdir()  # a sweep that never finished a run
    assert main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path}: none of target/results.jsonl, ")
    assert not (tmp_path / "claims.md").exists()
    assert main(["--out", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == f"error: --out {tmp_path / 'nowhere'}: no such directory (issue 57's session " \
                                      "folder)\n"


def test_the_command_prints_where_it_wrote(tmp_path, capsys):
    _session(tmp_path, {"target": _largest_target()})
    assert main(["--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'claims.md'}\n"
    data = json.loads((tmp_path / "claims.json").read_text())
    assert data["plan"]["target"] == [150_000, 300_000, 600_000] and data["source_text"] == SOURCE
    assert data["unigram"]["target"] == {"bits_per_byte": 4.25, "bits_per_char": 2.5, "loss": 6.0}


def test_extensions_better_start_is_the_rival_judged(tmp_path):
    """Extension, as XPT, runs from two starts; the verdict takes the one with the lower Ukrainian bits per byte."""
    extend = (_pair("extend", 720_000, 2.40, 1.02, 0.01, 0.01)
              + _pair("extend_subword_mean", 720_000, 1.60, 1.02, 0.01, 0.01, base_method="extend"))
    _session(tmp_path, {"target": _largest_target(), "extend": extend})
    verdict = write(tmp_path)["by_size"][0]["verdicts"]["does XPT beat vocabulary extension"]
    assert verdict["verdict"] == "yes" and verdict["rival"] == pytest.approx(1.60)
    assert "against vocabulary extension, subword_mean start 1.6000" in verdict["text"]
    _session(tmp_path / "unscored", {"target": _largest_target(), "extend": [_run("extend", 720_000, 1)]})
    verdict = write(tmp_path / "unscored")["by_size"][0]["verdicts"]["does XPT beat vocabulary extension"]
    assert verdict == {"verdict": "not measured", "text": "extend has no text scores"}
