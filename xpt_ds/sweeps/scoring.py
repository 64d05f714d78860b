"""How a sweep scores a trained run, stage by stage: ``xpt_ds.cli.evaluate`` on the test shards (``intrinsic``),
export and fine-tuning (``downstream``), ``--score-text``'s raw-text scores of the export and of the source itself
(``text_scores``, ``source_text``), ``--probe-text``'s probe (``probe_scores``), the unigram reference
(``unigram``) and ``--drop-weights``; and what a row records of its scoring, compared when the sweep runs again
(``scoring_diff``)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


from xpt_ds.io.paths import write_text_atomic
from xpt_ds.sweeps.plan import Plan, Run
from xpt_ds.sweeps.rows import (INTRINSIC_KEYS, OPTIONAL_KEYS, PROBE_SUFFIX, TEXT_KEYS, downstream_row, read_json,
                                   text_row)
from xpt_ds.sweeps.stages import Stages, add_seconds, free_name


def intrinsic(plan: Plan, run: Run, stages: Stages) -> dict:
    run_dir = plan.run_dir(run)
    out = run_dir / "eval.json"
    argv = ["--run", str(run_dir), *plan.tag_args(run), "--shards", *plan.test_shards, *plan.evaluate_args,
            "--out", str(out)]
    add_seconds(run_dir, "evaluate", stages.module("xpt_ds.cli.evaluate", argv, run_dir / "evaluate.log", "evaluate"))
    result = json.loads(out.read_text())
    return {**{k: result[k] for k in INTRINSIC_KEYS}, **{k: result[k] for k in OPTIONAL_KEYS if k in result},
            **({"objective": result["objective"]} if "objective" in result else {}),  # a decoder's: next_token
            "eval_tokens": result["tokens"], "checkpoint": result["tag"]}


def export_run(plan: Plan, run: Run, stages: Stages, log: Path) -> float:
    """``xpt_ds.cli.export`` of the checkpoint the run is scored from (its best under checkpoint.keep_best) to
    RUN_DIR/export, in place of one there; its seconds."""
    run_dir = plan.run_dir(run)
    shutil.rmtree(run_dir / "export", ignore_errors=True)
    argv = ["--run", str(run_dir), *plan.tag_args(run), "--out", str(run_dir / "export")]
    return stages.module("xpt_ds.cli.export", argv, log, "export")


def _kept_finetuning(plan: Plan, results: Path, recorded: Path) -> bool:
    """Whether ``results`` (RUN_DIR/finetune/results.json) is a fine-tuning to keep: one that scored its metric
    (a fine-tuning whose every seed diverged writes results.json with an empty summary, then fails, before the
    sweep records its arguments) and was run with this sweep's fine-tuning arguments (``recorded``, the
    sweep_args.json written once it succeeded; one from before 2026-11-28 has none and is kept)."""
    if recorded.is_file() and read_json(recorded) != plan.finetune_args:
        return False  # other files or flags
    r = read_json(results)
    try:
        return "mean" in r["summary"][r["config"]["metric"]]  # what the row reads (rows.downstream_row)
    except (KeyError, TypeError):
        return False


def downstream(plan: Plan, run: Run, stages: Stages) -> tuple[dict, bool]:
    """Export, fine-tune on every seed, and the headline metric's mean ± std; and whether it exported (the text
    scores then read that export). A fine-tuning already there is kept when it scored its metric and was run with
    this sweep's fine-tuning arguments (``_kept_finetuning``); else (other arguments, or one that failed: every
    seed diverged) it moves to ``finetune.superseded`` and runs again."""
    run_dir = plan.run_dir(run)
    results, recorded = run_dir / "finetune" / "results.json", run_dir / "finetune" / "sweep_args.json"
    if results.is_file() and not _kept_finetuning(plan, results, recorded):
        results.parent.rename(free_name(results.parent, ".superseded"))  # fine-tune again
    exported = not results.is_file()
    if exported:
        recorded.unlink(missing_ok=True)  # recorded once this fine-tuning succeeds
        log = run_dir / "finetune.log"
        seconds = export_run(plan, run, stages, log)
        seconds += stages.process([sys.executable, "-m", "xpt_ds.cli.finetune", "--model", str(run_dir / "export"),
                                   "--out", str(results.parent), *plan.finetune_args], log, "finetune")
        recorded.write_text(json.dumps(plan.finetune_args) + "\n")
        add_seconds(run_dir, "finetune", seconds)
    return downstream_row(json.loads(results.read_text())), exported


def text_scores(plan: Plan, run: Run, stages: Stages, exported: bool) -> dict:
    """``--score-text``: the run's export (made now, unless ``downstream`` made it for this row) scored on each
    text file by ``xpt_ds.cli.evaluate --text`` into RUN_DIR/text_LABEL.json, at evaluate's default --seq-len
    (the model's positions: an export has its source's, so the source and every run read the same windows);
    the row's ``text``: {label: bits per byte, pieces per word, tokens, bytes}. Output in RUN_DIR/text.log,
    seconds (export included) under "text" in sweep_seconds.json."""
    run_dir = plan.run_dir(run)
    log = run_dir / "text.log"
    seconds = 0.0 if exported else export_run(plan, run, stages, log)
    text = {}
    for label, spec in plan.score_text.items():
        out = run_dir / f"text_{label}.json"
        argv = ["--model", str(run_dir / "export"), *plan.text_args, "--text", spec["file"], "--out", str(out)]
        seconds += stages.module("xpt_ds.cli.evaluate", argv, log, "text")
        text[label] = text_row(read_json(out))
    add_seconds(run_dir, "text", seconds)
    return {"text": text}


def probe_scores(plan: Plan, run: Run, stages: Stages) -> dict:
    """``--probe-text LABEL``: ``xpt_ds.cli.probe`` of the checkpoint the run is scored from on LABEL's file
    (RUN_DIR/probe.json, output in RUN_DIR/probe.log, seconds under "probe" in sweep_seconds.json), against the
    run's own model.source, at evaluate --text's windows; {LABEL_probe: the figures of its layers with the source's
    embeddings and head (``xpt_ds.evaluation.decoder_probe.layers_row``)}, for the row's ``text``."""
    from xpt_ds.evaluation.decoder_probe import layers_row
    run_dir, label = plan.run_dir(run), plan.probe_text
    out = run_dir / "probe.json"
    argv = ["--run", str(run_dir), *plan.tag_args(run), "--source-text", plan.score_text[label]["file"],
            *plan.text_args, "--out", str(out)]
    add_seconds(run_dir, "probe", stages.module("xpt_ds.cli.probe", argv, run_dir / "probe.log", "probe"))
    rows = read_json(out)["rows"]
    figures = rows[layers_row(rows)]
    return {label + PROBE_SUFFIX: {k: figures[k] for k in TEXT_KEYS}}


def _unigram_args(plan: Plan) -> dict:
    """What DIR/unigram.json is scored with (DIR/unigram.args.json records it)."""
    return {"test_shards": plan.test_shards, "evaluate_args": plan.evaluate_args, "unigram": plan.unigram_shards}


def unigram_state(plan: Plan) -> str:
    """'' (nothing to score: no --unigram, or unigram.json scored with these arguments), 'missing', or 'changed'
    (scored with other test shards, evaluation arguments or unigram shards)."""
    out, record = plan.out / "unigram.json", plan.out / "unigram.args.json"
    if not plan.unigram_shards:
        return ""
    if not out.is_file():
        return "missing"
    if record.is_file():
        same = json.loads(record.read_text()) == _unigram_args(plan)
    else:  # scored before 2026-11-28: its own JSON names the shards
        old = json.loads(out.read_text())
        same = (old.get("shards"), old.get("unigram")) == (plan.test_shards, plan.unigram_shards)
    return "" if same else "changed"


def unigram(plan: Plan, run: Run, stages: Stages, tag_args: list[str] | None = None) -> None:
    """DIR/unigram.json: the unigram predictor of ``plan.unigram_shards`` on the sweep's test masks, read with
    ``run``'s checkpoint (its tokenizer and data settings; every arm of a sweep shares the tokenizer), the one
    ``tag_args`` names (default: the one the run is scored from). As the rows: scored with other arguments, it is
    scored again on request only (``--rerun-changed``; the old one kept as unigram.json.superseded)."""
    out = plan.out / "unigram.json"
    state = unigram_state(plan)
    if not state or state == "changed" and not plan.rerun_changed:
        return
    if state == "changed":
        out.rename(free_name(out, ".superseded"))
    argv = ["--run", str(plan.run_dir(run)), *(plan.tag_args(run) if tag_args is None else tag_args), "--shards",
            *plan.test_shards, *plan.evaluate_args, "--unigram", *plan.unigram_shards, "--out", str(out)]
    stages.module("xpt_ds.cli.evaluate", argv, plan.out / "unigram.log", "unigram")
    (plan.out / "unigram.args.json").write_text(json.dumps(_unigram_args(plan)) + "\n")


# The dtype the source is scored in, as each run's export is (evaluate --text's default; exports store float32).
# Recorded, so that a source_text.json from before evaluate ran a bf16-stored source in float32 (it ran it in bf16)
# counts as scored otherwise.
SOURCE_TEXT_DTYPE = "float32"


def _source_text_args(plan: Plan) -> dict:
    """What DIR/source_text.json is scored with (DIR/source_text.args.json records it): the source, the files
    and their hashes, evaluate's arguments, the dtype."""
    return {"source": plan.text_source, "score_text": plan.score_text, "text_args": plan.text_args,
            "dtype": SOURCE_TEXT_DTYPE}


def source_text_state(plan: Plan) -> str:
    """'' (nothing to score: no --score-text, or source_text.json scored with these arguments), 'missing', or
    'changed' (scored with another source, other text under a label (by content, wherever the file is), other
    arguments or in another dtype)."""
    out, record = plan.out / "source_text.json", plan.out / "source_text.args.json"
    if not plan.score_text:
        return ""
    if not out.is_file():
        return "missing"
    if not record.is_file():
        return "changed"
    old, now = read_json(record), _source_text_args(plan)
    same = all(old.get(k) == now[k] for k in ("source", "text_args", "dtype")) and \
        _text_content(old.get("score_text")) == _text_content(now["score_text"])
    return "" if same else "changed"


def source_text_changed(plan: Plan) -> str:
    """The warning for a source_text.json scored otherwise, kept without ``--rerun-changed``."""
    return (f"warning: {plan.out / 'source_text.json'} was scored with another source, other text files or in "
            "another dtype; --rerun-changed scores it again")


def source_text(plan: Plan, stages: Stages, say=print) -> None:
    """DIR/source_text.json: {label: xpt_ds.cli.evaluate --text's figures} of the source itself on the
    ``--score-text`` files, the reference beside every run's (what adapting it cost each text), scored in one
    evaluate (the source loads once: a GGUF is dequantized), output in DIR/source_text.log. As unigram.json:
    scored with other arguments, it is scored again on request only (``--rerun-changed``), else kept and said."""
    state = source_text_state(plan)
    if not state:
        return
    out = plan.out / "source_text.json"
    if state == "changed":
        if not plan.rerun_changed:
            say(source_text_changed(plan))
            return
        out.rename(free_name(out, ".superseded"))
    scored = plan.out / "source_text.evaluate.json"
    files = [spec["file"] for spec in plan.score_text.values()]
    stages.module("xpt_ds.cli.evaluate", ["--model", plan.text_source, *plan.text_args, "--text", *files,
                                          "--dtype", SOURCE_TEXT_DTYPE, "--out", str(scored)],
                  plan.out / "source_text.log", "source text")
    figures = read_json(scored)["text"]  # keyed by str(Path(file)), as evaluate names each file
    write_text_atomic(out, json.dumps({label: figures[str(Path(f))] for label, f in zip(plan.score_text, files)},
                                      indent=1) + "\n")
    scored.unlink()
    (plan.out / "source_text.args.json").write_text(json.dumps(_source_text_args(plan)) + "\n")


def drop_weights(run_dir: Path) -> list[str]:
    """``--drop-weights``, once the run's row is written: delete RUN_DIR/checkpoints (every tag, the kept phase
    ends, abandoned branches, universal conversions: ``xpt_ds.checkpoint.store``) and RUN_DIR/export, the run's
    only weights; what was there of the two. Everything else stays: status.json, best.json, config.yaml, the
    scores (eval.json, text_*.json, probe.json, finetune/), logs, metrics and TensorBoard events. Such a run,
    resumed later, has no checkpoint: ``train`` sets it aside and trains it from the start."""
    dropped = []
    for name in ("checkpoints", "export"):
        if (run_dir / name).exists():
            shutil.rmtree(run_dir / name)
            dropped.append(name)
    return dropped


def _scoring_keys(now: dict) -> list[str]:
    """What a rerun compares of a row's scoring (rows record it since 2026-11-28): the test shards and the
    evaluation arguments, the fine-tuning arguments when this invocation fine-tunes and the text files
    (``score_text``, recorded since 2026-11-29) when it scores text; left out, the row keeps its fine-tuning or its
    text scores, and a row from before either has none, which differs from any given."""
    return ["test_shards", "evaluate_args"] + [k for k in ("finetune_args", "score_text", "probe_text")
                                               if now.get(k) is not None]


def scoring_diff(old: dict, now: dict) -> str:
    """What differs between a row's recorded scoring and this invocation's; empty when nothing does. The text
    files compare by label and content (``_text_content``), not by where they are."""
    def seen(k: str, scoring: dict):
        return _text_content(scoring.get(k)) if k == "score_text" else scoring.get(k)
    # the test manifests' hash (rows record it since 2026-12-04): the same paths prepared again are other test data
    keys = _scoring_keys(now) + (["test_data"] if "test_data" in old and "test_data" in now else [])
    return "; ".join(f"{k} {old.get(k)} -> {now[k]}" for k in keys if seen(k, old) != seen(k, now))


def _text_content(score_text: dict | None) -> dict | None:
    """``--score-text``'s record as what it scores: label -> the file's hash, wherever the file is (a session
    unpacked elsewhere, or a rehearsal whose texts are copies in its own folder, scores the same text)."""
    if not isinstance(score_text, dict):
        return score_text
    return {label: (spec or {}).get("sha256") for label, spec in score_text.items()}
