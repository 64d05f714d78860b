"""``python -m xpt_ds.cli.sweep --score-text LABEL=FILE ... --drop-weights`` (issue 57: what adapting an English
decoder costs English): one real tiny decoder sweep (2 arms, 1 size, 2 + 2 steps) shared by the tests, whose
rows carry each run's export's bits per byte on raw text exactly as ``xpt_ds.cli.evaluate --text`` scores that
export, beside the source's own (source_text.json), in results.md and summary.json; whose checkpoints and exports
are gone once the rows are written, the rest of each run kept; and which a second invocation leaves alone. The
sweep also probes each run on the English file (``--probe-text en``: ``xpt_ds.cli.probe``'s layers row as the
row's ``en_probe``). A row or source_text.json scored on other text is scored again on request only
(``--rerun-changed``). And the one-line refusals when the plan is built: a missing file, a bad label, a
masked-LM source, a --probe-text that is no --score-text label."""
import contextlib
import json
import shlex
import shutil

import pytest

from conftest import base_config, one_error_line, run_main, write_config
from hub_cache import cache_repo
from sweep_builders import ENGLISH, decoder_source, result_rows
from xpt_ds.cli.evaluate import main as evaluate_main
from xpt_ds.cli.sweep import main as sweep_main
from xpt_ds.cli.sweep import parse_args
from xpt_ds.sweeps import runner
from xpt_ds.sweeps.scoring import source_text, source_text_state
from xpt_ds.sweeps.stages import Stages
from xpt_ds.sweeps.plan import Run, build_plan

ARMS = ("xpt", "scratch")
# what --drop-weights leaves in a run directory
KEPT = ("status.json", "config.yaml", "eval.json", "text_en.json", "text_ko.json", "probe.json", "train.log",
        "evaluate.log", "text.log", "probe.log", "metrics.jsonl", "sweep_seconds.json", "tb")


@pytest.fixture(scope="module")
def decoder_base(tmp_path_factory, tiny_decoder, corpus, corpus_text):
    """A two-phase xpt base config (2 + 2 steps) on a tiny GPT-2 source with its own tokenizer, the test shards,
    and two text files: English, and the Hangul of the target corpus."""
    root = tmp_path_factory.mktemp("decoder_base")
    source = decoder_source(tiny_decoder("gpt2", True), root / "source")
    cfg = base_config(root / "unused", source, corpus,
                      phases=[{"name": "phase1", "steps": 2, "lr": 1e-3}, {"name": "phase2", "steps": 2, "lr": 5e-4}])
    cfg["data"].update(valid_shards=[], num_workers=0)
    en, ko = root / "en.txt", root / "ko.txt"
    en.write_text("\n".join(ENGLISH[:3]) + "\n", encoding="utf-8")
    ko.write_text("\n".join(corpus_text.read_text(encoding="utf-8").splitlines()[:4]) + "\n", encoding="utf-8")
    return {"config": write_config(root / "base.yaml", cfg), "source": source, "en": en, "ko": ko,
            "test_shards": [f"{corpus}/manifest.json:test"]}


@pytest.fixture(scope="module")
def text_sweep(tmp_path_factory, decoder_base):
    """The sweep, run once through the CLI (in a forked child, ``run_main``): its folder, arguments, stdout, the
    text files and, per arm, a copy of the export its row was scored with, taken as --drop-weights deletes it
    (``runner.drop_weights`` wrapped here before the fork, so the child runs the wrapper)."""
    root = tmp_path_factory.mktemp("text_sweep")
    en, ko, out = decoder_base["en"], decoder_base["ko"], root / "sweep"
    args = ["--config", str(decoder_base["config"]), "--methods", *ARMS, "--sizes", "200", "--out", str(out),
            "--test-shards", *decoder_base["test_shards"], "--score-text", f"en={en}", f"ko={ko}", "--probe-text", "en",
            "--drop-weights"]
    real = runner.drop_weights

    def keep_export(run_dir):
        shutil.copytree(run_dir / "export", root / "exports" / run_dir.parent.name)
        return real(run_dir)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "drop_weights", keep_export)
        proc = run_main("xpt_ds.cli.sweep", args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return {"out": out, "args": args, "stdout": proc.stdout, "source": decoder_base["source"], "en": en, "ko": ko,
            "exports": root / "exports", "test_shards": decoder_base["test_shards"]}


def _evaluate_text(model, files, out):
    with contextlib.redirect_stdout(None):
        assert evaluate_main(["--model", str(model), "--text", *map(str, files), "--out", str(out)]) == 0
    return json.loads(out.read_text())["text"]


def test_rows_hold_what_evaluate_text_gives_for_the_runs_export(text_sweep, tmp_path):
    """Each row's text figures are evaluate --text's for that run's own export, to 1e-9 bits per byte: the sweep
    adds no scoring of its own. Its seconds are counted under "text"."""
    rows = {r["method"]: r for r in result_rows(text_sweep["out"])}
    assert sorted(rows) == sorted(ARMS)
    for arm, row in rows.items():
        assert list(row["text"]) == ["en", "ko", "en_probe"]
        assert row["scoring"]["score_text"]["en"]["file"] == str(text_sweep["en"])
        for label in ("en", "ko"):
            want = _evaluate_text(text_sweep["exports"] / arm, [text_sweep[label]], tmp_path / f"{arm}_{label}.json")
            want = want[str(text_sweep[label])]
            got = row["text"][label]
            assert set(got) == {"bits_per_byte", "pieces_per_word", "tokens", "bytes"}
            assert got["bits_per_byte"] == pytest.approx(want["bits_per_byte"], abs=1e-9)
            assert (got["pieces_per_word"], got["tokens"], got["bytes"]) == (want["pieces_per_word"], want["tokens"],
                                                                             want["bytes"])
        seconds = json.loads((text_sweep["out"] / row["run_dir"] / "sweep_seconds.json").read_text())
        assert seconds["text"] > 0 and seconds["probe"] > 0
    assert rows["xpt"]["text"]["en"]["bits_per_byte"] != rows["scratch"]["text"]["en"]["bits_per_byte"]


def test_rows_hold_the_probe_of_their_layers_beside_the_source(text_sweep):
    """--probe-text en: each row's en_probe is its probe.json's row of the reused layers alone with the source's
    embeddings and head (XPT: without ITLs), in the source's tokenizer, so it reads the source's pieces and bytes;
    the probe's source row is source_text.json's own figure; results.md has the column and the source under it."""
    out = text_sweep["out"]
    source = json.loads((out / "source_text.json").read_text())["en"]
    for row in result_rows(out):
        probe = json.loads((out / row["run_dir"] / "probe.json").read_text())
        assert row["scoring"]["probe_text"] == "en" and probe["source_text"] == str(text_sweep["en"])
        layers = probe["rows"]["post-trained, source vocabulary, without ITLs"]
        assert row["text"]["en_probe"] == {k: layers[k] for k in ("bits_per_byte", "pieces_per_word", "tokens",
                                                                  "bytes")}
        assert (layers["tokens"], layers["bytes"]) == (source["tokens"], source["bytes"])
        reference = probe["rows"]["source model, source vocabulary"]
        assert reference["bits_per_byte"] == pytest.approx(source["bits_per_byte"], abs=1e-9)
        assert layers["bits_per_byte"] != reference["bits_per_byte"]  # phase 2 trained the layers
    md = (out / "results.md").read_text()
    assert "| en_probe bits per byte |" in md and "*en_probe* is the probe (`xpt-ds probe`" in md
    source_row = next(line for line in md.splitlines() if line.startswith("| *Source (model.source)* |"))
    assert source_row.count(f"| {source['bits_per_byte']:.4f} | {source['pieces_per_word']:.2f} |") == 2


def test_probe_text_names_a_score_text_label(tmp_path, decoder_base, capsys):
    argv = ["--config", str(decoder_base["config"]), "--methods", "xpt", "--sizes", "200", "--out",
            str(tmp_path / "sweep"), "--test-shards", *decoder_base["test_shards"], "--score-text",
            f"en={decoder_base['en']}", "--probe-text", "uk"]
    one_error_line(sweep_main(argv), capsys.readouterr().err, "--probe-text uk: not a --score-text label (en)")
    assert not (tmp_path / "sweep/runs").exists()


def test_the_source_is_scored_on_the_same_text_and_reported(text_sweep, tmp_path):
    """source_text.json is the untouched source on the same files, as evaluate --text scores it; results.md has a
    bits-per-byte and a pieces-per-word column per label and the source's row; summary.json carries both."""
    out = text_sweep["out"]
    source = json.loads((out / "source_text.json").read_text())
    assert list(source) == ["en", "ko"]
    want = _evaluate_text(text_sweep["source"], [text_sweep["en"], text_sweep["ko"]], tmp_path / "source.json")
    for label in ("en", "ko"):
        assert source[label]["bits_per_byte"] == pytest.approx(want[str(text_sweep[label])]["bits_per_byte"],
                                                                abs=1e-9)
    assert json.loads((out / "source_text.args.json").read_text())["source"] == str(text_sweep["source"])

    md = (out / "results.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("| Method |"))
    for column in ("en bits per byte", "en pieces per word", "ko bits per byte", "ko pieces per word"):
        assert f"| {column} |" in head
    source_row = next(line for line in md.splitlines() if line.startswith("| *Source (model.source)* |"))
    assert f"| {source['en']['bits_per_byte']:.4f} | {source['en']['pieces_per_word']:.2f} |" in source_row
    assert f"en = `{text_sweep['en']}`" in md
    summary = json.loads((out / "summary.json").read_text())
    assert summary["source_text"] == source and all("text" in r for r in summary["rows"])


def test_drop_weights_leaves_the_scores_and_a_rerun_skips_the_runs(text_sweep):
    """--drop-weights deleted each run's checkpoints and export after its row, nothing else; the same command
    again skips both runs (no training, no warning, rows unchanged) and scores the source no second time."""
    out = text_sweep["out"]
    for arm in ARMS:
        run_dir = out / "runs" / arm / "200"
        assert not (run_dir / "checkpoints").exists() and not (run_dir / "export").exists()
        assert all((run_dir / name).exists() for name in KEPT), sorted(p.name for p in run_dir.iterdir())
        assert f"dropped {arm} 200's checkpoints and export (--drop-weights)" in text_sweep["stdout"]
    logs = {arm: (out / "runs" / arm / "200" / "train.log").stat().st_mtime_ns for arm in ARMS}
    rows = (out / "results.jsonl").read_text()
    again = run_main("xpt_ds.cli.sweep", text_sweep["args"])
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert again.stdout.count("skip ") == 2 and "warning" not in again.stdout and "dropped" not in again.stdout
    assert {arm: (out / "runs" / arm / "200" / "train.log").stat().st_mtime_ns for arm in ARMS} == logs
    assert (out / "results.jsonl").read_text() == rows
    assert (out / "source_text.log").read_text().count("$ python -m") == 1  # the source scored once
    # --unigram asked for now: no run holds a checkpoint to read the tokenizer and test masks from, which it says
    late = run_main("xpt_ds.cli.sweep", [*text_sweep["args"], "--unigram", text_sweep["test_shards"][0]])
    assert late.returncode == 0, late.stdout[-2000:] + late.stderr[-3000:]
    assert f"warning: {out / 'unigram.json'} cannot be scored: no run of this sweep holds a checkpoint" in \
        late.stdout and not (out / "unigram.json").exists() and (out / "results.jsonl").read_text() == rows


def test_text_scored_otherwise_is_scored_again_on_request_only(decoder_base, tmp_path, capsys):
    """A row records its text files (and their hashes): other text under a label is a warning, or with
    --rerun-changed a rescoring from the run's checkpoint, but the same text elsewhere (a session unpacked in
    another folder) is the same scoring; a row from before --score-text (no score_text in its scoring) is
    scored otherwise too; a sweep without --score-text keeps the rows' text scores. source_text.json the same
    way: kept with a warning, or with --rerun-changed set aside and scored again; one recorded without the dtype
    (scored before the source ran in float32) is scored otherwise."""
    from xpt_ds.checkpoint.tags import MARKER
    out = tmp_path / "sweep"
    base = ["--config", str(decoder_base["config"]), "--methods", "xpt", "--sizes", "200", "--out", str(out),
            "--test-shards", *decoder_base["test_shards"]]
    en, ko = f"en={decoder_base['en']}", f"en={decoder_base['ko']}"
    plan = build_plan(parse_args([*base, "--score-text", en]))
    run = Run("xpt", 200)
    tag = plan.run_dir(run) / "checkpoints" / "global_step000000004"
    tag.mkdir(parents=True)
    (tag / MARKER).write_text(json.dumps({"global_step": 4}))  # a checkpoint to score again from
    row = {"method": "xpt", "size": 200, "seed": None, "config_sha256": plan.config_sha["xpt"],
           "train_args": shlex.join(plan.train_args(run)), "scoring": plan.scoring(run)}
    before = {k: v for k, v in row["scoring"].items() if k != "score_text"}  # a row from before --score-text
    moved = tmp_path / "elsewhere" / "en.txt"
    moved.parent.mkdir()
    moved.write_bytes(decoder_base["en"].read_bytes())
    cases = ((row["scoring"], [], False), (row["scoring"], ["--score-text", ko], True),
             (before, ["--score-text", en], True), (row["scoring"], ["--score-text", f"en={moved}"], False))
    for scoring, extra, warned in cases:
        (out / "results.jsonl").write_text(json.dumps({**row, "scoring": scoring}) + "\n")
        assert runner._Sweep(build_plan(parse_args([*base, *extra]))).pending() == []
        said = capsys.readouterr().out
        assert ("scored with other test shards, evaluation or fine-tuning (score_text" in said) == warned, said
    assert runner._Sweep(build_plan(parse_args([*base, "--score-text", ko, "--rerun-changed"]))).pending() == [run]
    assert "score again xpt 200" in capsys.readouterr().out

    stages = Stages(plan)
    with contextlib.redirect_stdout(None):
        source_text(plan, stages)
    first = json.loads((out / "source_text.json").read_text())
    assert source_text_state(build_plan(parse_args([*base, "--score-text", f"en={moved}"]))) == ""
    args = json.loads((out / "source_text.args.json").read_text())
    assert args["dtype"] == "float32"
    (out / "source_text.args.json").write_text(json.dumps({k: v for k, v in args.items() if k != "dtype"}))
    assert source_text_state(plan) == "changed"  # recorded before evaluate --text ran a source in float32
    (out / "source_text.args.json").write_text(json.dumps(args))
    other = build_plan(parse_args([*base, "--score-text", ko]))
    said = []
    source_text(other, stages, said.append)
    assert "source_text.json was scored with another source, other text files or in another dtype" in said[0]
    assert json.loads((out / "source_text.json").read_text()) == first
    rerun = build_plan(parse_args([*base, "--score-text", ko, "--rerun-changed"]))
    with contextlib.redirect_stdout(None):
        source_text(rerun, stages)
    assert json.loads((out / "source_text.json.superseded").read_text()) == first
    assert json.loads((out / "source_text.json").read_text())["en"]["bytes"] == len(
        "".join(decoder_base["ko"].read_text(encoding="utf-8").splitlines()).encode())


@pytest.mark.parametrize("score_text,culprit", [
    (["en=nope.txt"], "--score-text 'en=nope.txt': no such file nope.txt"),
    (["1en={en}"], "--score-text '1en="),
    (["en-us={en}"], "LABEL a plain identifier"),
    (["en={en}", "en={en}"], "the label 'en' is given twice"),
], ids=["missing-file", "label-starts-with-a-digit", "label-with-a-dash", "label-twice"])
def test_bad_text_arguments_are_one_line_errors(score_text, culprit, tmp_path, decoder_base, capsys):
    """Checked when the plan is built, before any run trains."""
    argv = ["--config", str(decoder_base["config"]), "--methods", "xpt", "--sizes", "200", "--out",
            str(tmp_path / "sweep"), "--test-shards", *decoder_base["test_shards"], "--score-text",
            *(s.format(en=decoder_base["en"]) for s in score_text)]
    one_error_line(sweep_main(argv), capsys.readouterr().err, culprit)
    assert not (tmp_path / "sweep/runs").exists()


def test_a_masked_lm_source_cannot_be_text_scored(tmp_path, sweep_config, tiny_roberta, decoder_base, capsys):
    """Raw text is scored by next-token prediction: a masked LM's export cannot be, so the plan refuses it."""
    config, test_shards = sweep_config
    argv = ["--config", str(config), "--methods", "xpt", "--sizes", "100", "--out", str(tmp_path / "sweep"),
            "--test-shards", *test_shards, "--score-text", f"en={decoder_base['en']}"]
    one_error_line(sweep_main(argv), capsys.readouterr().err, f"model.source {tiny_roberta} is a roberta model, "
                   "not a decoder")


def test_the_report_folds_text_scores_over_seeds(tmp_path):
    """Replicates' text figures are folded as the other scores are: mean ± sample standard deviation per label,
    the lower bits per byte in bold; a row from before --score-text shows '–'."""
    from xpt_ds.sweeps.report import write_report
    from xpt_ds.sweeps.rows import INTRINSIC_KEYS
    text = {1: {"en": {"bits_per_byte": 1.0, "pieces_per_word": 1.5, "tokens": 10, "bytes": 40}},
            2: {"en": {"bits_per_byte": 2.0, "pieces_per_word": 1.5, "tokens": 10, "bytes": 40}}}
    rows = [{"method": "xpt", "size": 200, "seed": seed, "steps": 4, "epochs": 1.0, "train_seconds": 1.0,
             "wall_seconds": 1.0, **{k: 2.0 for k in INTRINSIC_KEYS}, "text": text[seed]} for seed in (1, 2)]
    rows.append({**rows[0], "method": "scratch", "seed": None, "text": {"en": {**text[1]["en"], "bits_per_byte": 3.0}}})
    rows.append({**rows[0], "method": "xpt_sp", "seed": None})
    del rows[-1]["text"]
    write_report(tmp_path, rows, tensorboard=False)
    md = (tmp_path / "results.md").read_text()
    assert "| XPT | " in md and "| **1.5000 ± 0.7071** | 1.50 ± 0.00 |" in md
    assert "| 3.0000 | 1.50 |" in md and "| – | – |" in md
    folded = next(r for r in json.loads((tmp_path / "summary.json").read_text())["rows"] if r["method"] == "xpt")
    assert folded["text"]["en"]["bits_per_byte"] == 1.5 and folded["text"]["en"]["tokens_std"] == 0


def test_a_hub_id_source_is_the_text_reference_when_it_has_tokenizer_files(tmp_path, decoder_base, monkeypatch,
                                                                            capsys):
    """``model.source`` a hub id (here from the Hugging Face cache, the hub switched off): the plan scores it as the
    reference (``evaluate --text`` reads hub ids too); the same id without tokenizer files is refused."""
    import yaml
    from huggingface_hub import constants
    for repo, leave_out in (("org/tiny", ()), ("org/bare", {"tokenizer.json", "tokenizer_config.json"})):
        cache_repo(tmp_path / "hub", repo, decoder_base["source"], leave_out)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    cfg = yaml.safe_load(decoder_base["config"].read_text())

    def argv(repo):
        cfg["model"]["source"] = repo
        config = write_config(tmp_path / f"{repo.replace('/', '_')}.yaml", cfg)
        return ["--config", str(config), "--methods", "xpt", "--sizes", "200", "--out", str(tmp_path / repo),
                "--test-shards", *decoder_base["test_shards"], "--score-text", f"en={decoder_base['en']}"]

    assert build_plan(parse_args(argv("org/tiny"))).text_source == "org/tiny"
    one_error_line(sweep_main(argv("org/bare")), capsys.readouterr().err,
                   "--score-text: model.source org/bare has no tokenizer files")
