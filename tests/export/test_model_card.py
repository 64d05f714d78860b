"""The model card an export carries (README.md, xpt_ds.export.model_card): it loads with huggingface_hub, its
metadata is what ModelCardData takes, its figures are the run's own records; ``evaluate --card`` adds a section
and replaces it on a second evaluation of the same kind; ``evaluate --model RUN_DIR`` names --run."""
import inspect
import json
import re

import pytest
import yaml
from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.utils import validate_repo_id

from conftest import run_main
from xpt_ds.export.model_card import EVALUATIONS, card_metadata, hub_id
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.embedding_init.context import summary
from xpt_ds.cli.export import main as export_main

pytestmark = pytest.mark.multiproc  # straight_runs: made once per session by a 2-rank launch, shared with others


def check_metadata(meta: dict) -> None:
    """Offline stand-in for ``ModelCard.validate`` (which posts the card to the Hub's validate-yaml API, so it
    fails here: no network): every key a ModelCardData field, each of the type the Hub takes, and
    ModelCardData keeps them as they are."""
    fields = set(inspect.signature(ModelCardData.__init__).parameters) - {"self", "kwargs", "ignore_metadata_errors"}
    assert set(meta) <= fields, set(meta) - fields
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] in ("fill-mask", "text-generation")
    assert isinstance(meta["tags"], list) and all(isinstance(t, str) for t in meta["tags"])
    if "base_model" in meta:
        validate_repo_id(meta["base_model"])
    assert ModelCardData(**meta).to_dict() == meta


def table(text: str, heading: str) -> dict[str, str]:
    """The metric | value rows of the first table after ``heading``."""
    rows = {}
    for line in text[text.index(heading):].split("| metric | value |", 1)[1].splitlines()[2:]:
        if not line.startswith("|"):
            break
        name, value = [c.strip() for c in line.strip("|").split("|")]
        rows[name] = value
    return rows


def export(run, out, *tag) -> str:
    assert export_main(["--run", str(run), "--out", str(out), *(["--tag", tag[0]] if tag else [])]) == 0
    return (out / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("step", [8, 4])
def test_the_card_loads_and_its_figures_are_the_runs_records(step, straight_runs, tmp_path):
    """The newest checkpoint and an earlier one: tokens seen and the last validation are those at its step."""
    run = straight_runs(1) / "run"
    out = tmp_path / "hf"
    text = export(run, out, tag_for(step))
    card = ModelCard.load(out / "README.md")
    meta = card.data.to_dict()
    check_metadata(meta)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert meta == {"library_name": "transformers", "pipeline_tag": "fill-mask", "tags": ["xpt-ds", "xpt"]}
    assert "base_model" not in meta and f"`{cfg['model']['source']}` (a local path, not a Hub id" in text
    assert "README.md" in json.loads((out / "xpt_export.json").read_text())["files"]

    rows = [dict(zip(["phase", "steps", "lr"], [c.strip(" `") for c in line.strip("|").split("|")][:3]))
            for line in text.split("## Training")[1].splitlines() if line.startswith("| `")]
    assert rows == [{"phase": p["name"], "steps": str(p["steps"]), "lr": f"{p['lr']:g}"} for p in cfg["phases"]]
    assert "`@new` (the method's preset): 79,944 parameters" in text  # the trainer's own count, test_trainer

    logged = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        logged.setdefault(json.loads(line)["step"], {}).update(json.loads(line))
    tokens = int(re.search(r"\*\*Tokens seen\*\*: ([\d,]+)", text).group(1).replace(",", ""))
    assert tokens == logged[step]["train/tokens_seen"] > 0
    if step == 8:
        assert tokens == json.loads((run / "status.json").read_text())["tokens_seen"]
    valid = {k.removeprefix("valid/"): v for k, v in logged[step].items() if k.startswith("valid/")}
    shown = table(text, "## Validation")
    assert f"At step {step} (" in text and shown.keys() == valid.keys()
    for k, v in valid.items():
        assert float(shown[k]) == pytest.approx(v, rel=1e-5), k

    report = json.loads((run / "embedding_init.json").read_text())
    assert f"`model.embedding_init: {cfg['model']['embedding_init']}`" in text and summary(report) in text
    assert f"--config {run.resolve() / 'config.yaml'} --run_dir=NEW_RUN_DIR" in text
    assert "torchrun --nproc_per_node 2 -m xpt_ds.cli.train" in text  # the run's 2 ranks
    assert f"--tag {tag_for(step)}" in text


def test_evaluate_adds_its_section_once_and_replaces_it(straight_runs, tmp_path):
    run = straight_runs(1) / "run"
    out = tmp_path / "hf"
    export(run, out)
    valid = yaml.safe_load((run.parent / "cfg.yaml").read_text())["data"]["valid_shards"]
    card = out / "README.md"
    header = card.read_text().split("\n---\n")[0]

    def evaluate(*extra):
        proc = run_main("xpt_ds.cli.evaluate", ["--model", str(out), "--shards", *valid, "--out",
                                            str(tmp_path / "e.json"), *extra])
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc, json.loads((tmp_path / "e.json").read_text())

    proc, scores = evaluate("--card")
    assert f"added a section to {card}" in proc.stderr
    text = card.read_text()
    assert text.count("<!-- xpt-ds evaluate ") == 1 and text.index("<!-- xpt-ds evaluate ") < text.index(EVALUATIONS)
    shown = table(text, "### `xpt-ds evaluate` on")
    for k in ("loss", "ppl", "hits@1", "mrr", "mr", "tokens", "bits_per_char"):
        assert float(shown[k].replace(",", "")) == pytest.approx(scores[k], rel=1e-5), k

    text = text.replace(shown["loss"], "STALE", 1)  # stands for an earlier model's score
    card.write_text(text)
    proc, again = evaluate("--card", str(card))
    assert f"replaced its section in {card}" in proc.stderr
    text = card.read_text()
    assert text.count("<!-- xpt-ds evaluate ") == 1 and "STALE" not in text and again["loss"] == scores["loss"]

    evaluate("--card", str(out), "--seq-len", "16")  # another setting: a section of its own
    text = card.read_text()
    assert text.count("<!-- xpt-ds evaluate ") == 2 and "sequences of 16 pieces" in text
    assert text.split("\n---\n")[0] == header  # the YAML is never touched
    check_metadata(ModelCard.load(card).data.to_dict())

    export(run, out)  # a new export: a new card (its scores were the old weights')
    assert "<!-- xpt-ds evaluate " not in card.read_text().split(EVALUATIONS)[0]


def test_a_users_own_card_is_kept(straight_runs, tmp_path):
    """A README.md the earlier export did not write is the user's: the export keeps it and says so."""
    run = straight_runs(1) / "run"
    out = tmp_path / "hf"
    export(run, out)
    record = json.loads((out / "xpt_export.json").read_text())
    (out / "xpt_export.json").write_text(json.dumps({"files": [f for f in record["files"] if f != "README.md"]}))
    (out / "README.md").write_text("the user's card")
    proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "README.md").read_text() == "the user's card"
    assert f"kept {out / 'README.md'}: not a file of the earlier export; so the export writes no model card" \
        in proc.stderr


def test_bad_model_and_card_arguments_are_one_line(straight_runs, tmp_path):
    run = straight_runs(1) / "run"
    valid = yaml.safe_load((run.parent / "cfg.yaml").read_text())["data"]["valid_shards"]
    for model, line in ((run, f"error: --model {run} is a training run directory, not an export: use --run {run}"),
                        (run / "checkpoints" / tag_for(4), f"error: --model {run / 'checkpoints' / tag_for(4)} is a "
                         f"checkpoint, not an export: use --run {run} --tag {tag_for(4)}")):
        proc = run_main("xpt_ds.cli.evaluate", ["--model", str(model), "--shards", *valid])
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line], proc.stderr[-2000:]
    out = tmp_path / "hf"
    export(run, out)
    (tmp_path / "other.md").write_text("---\ntags:\n- mine\n---\n\nnot an export's\n")
    for card, line in ((tmp_path / "other.md", f"error: --card {tmp_path / 'other.md'}: not a model card of an "
                        "xpt-ds export (its tags have no 'xpt-ds')"),
                       (tmp_path / "none.md", f"error: --card {tmp_path / 'none.md'}: no such file (xpt-ds export "
                        "writes its model card as README.md)")):
        proc = run_main("xpt_ds.cli.evaluate", ["--model", str(out), "--shards", *valid, "--card", str(card)])
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line], proc.stderr[-2000:]
    proc = run_main("xpt_ds.cli.evaluate", ["--run", str(run), "--shards", *valid, "--card"])
    assert proc.returncode == 2 and "--card adds the scores of an export (--model)" in proc.stderr


def test_base_model_is_a_hub_id_or_left_out(tmp_path):
    from xpt_ds.config import ModelConfig, TrainConfig
    assert hub_id("FacebookAI/roberta-base") == "FacebookAI/roberta-base" and hub_id("gpt2") == "gpt2"
    snapshot = tmp_path / "hub/models--FacebookAI--xlm-roberta-base/snapshots/e73636d4f797dec63c3081bb6ed5c7b0bb3f2089"
    assert hub_id(str(snapshot)) == "FacebookAI/xlm-roberta-base"  # the cache's snapshot: its Hub id
    (tmp_path / "org").mkdir()
    for local in (str(tmp_path / "org"), "./models/x", "~/m", "/data/models/roberta", "m/q4.gguf"):
        assert hub_id(local) is None, local
    meta = card_metadata(TrainConfig(model=ModelConfig(source="HuggingFaceTB/SmolLM2-135M", method="lora")), True)
    check_metadata(meta)
    assert meta == {"base_model": "HuggingFaceTB/SmolLM2-135M", "library_name": "transformers",
                    "pipeline_tag": "text-generation", "tags": ["xpt-ds", "lora"]}


def test_a_relative_local_source_is_no_hub_id_from_another_directory(tmp_path, monkeypatch):
    """``model.source: fx/roberta``, relative to where the run was launched, looks like a Hub id from any other
    directory: an export from there wrote ``base_model: fx/roberta``. The run directory and those above it are
    where a run is launched from."""
    from xpt_ds.config import ModelConfig, TrainConfig
    (tmp_path / "fx/roberta").mkdir(parents=True)
    run = tmp_path / "runs/relsrc/run"
    run.mkdir(parents=True)
    monkeypatch.chdir(run.parent)
    assert hub_id("fx/roberta", run) is None and hub_id("fx/roberta", run.relative_to(run.parent)) is None
    meta = card_metadata(TrainConfig(model=ModelConfig(source="fx/roberta")), False, run)
    assert "base_model" not in meta
    assert hub_id("FacebookAI/roberta-base", run) == "FacebookAI/roberta-base"


def test_a_marker_without_world_size_or_stage_gives_the_runs_ranks(straight_runs, tmp_path):
    """A COMPLETE marker of before 2026-11 holds the step alone: the card said '1 rank' and 'ZeRO stage ?' of a
    2-rank ZeRO-1 run, and a 1-rank command to train it again (``migrate.saved_world_size``: DeepSpeed's
    record)."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(straight_runs(1) / "run", run)
    (run / "checkpoints" / tag_for(8) / "COMPLETE").write_text(json.dumps({"global_step": 8}))
    text = export(run, tmp_path / "hf")
    assert "; 2 ranks, ZeRO stage 1." in text and "x 2 ranks) of up to" in text
    assert "torchrun --nproc_per_node 2 -m xpt_ds.cli.train" in text and "On 2 ranks, as the run" in text


def test_a_damaged_metrics_line_is_passed_by(tmp_path):
    """A metrics.jsonl line with bytes that are no UTF-8, or a JSON value that is no row: the card reads the
    validations around it (export stopped with a UnicodeDecodeError traceback)."""
    from xpt_ds.export.model_card import last_validation
    rows = [{"step": 2, "valid/loss": 3.0}, {"step": 4, "valid/loss": 2.5}, {"step": 6, "train/loss": 2.0}]
    lines = [json.dumps(r).encode() for r in rows]
    (tmp_path / "metrics.jsonl").write_bytes(b"\n".join([lines[0], b'{"step": 3, "valid/loss": \xff}', b"[1, 2]",
                                                         *lines[1:]]) + b"\n")
    assert last_validation(tmp_path, 6) == (4, {"valid/loss": 2.5})
    assert last_validation(tmp_path, 3) == (2, {"valid/loss": 3.0})
