"""Each bad input ends an entry point (``xpt_ds.cli.train``, ``export``, ``evaluate``, ``probe``, ``finetune``,
``sweep``, ``data_tools.cli.prepare``) with exit code 2 and one ``error:`` line naming the culprit: no traceback,
also when the error is raised in a DataLoader worker process."""
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import sentencepiece as spm
import yaml

from conftest import base_config, config_only, free_port, launch, run_main, write_config, write_synthetic_corpus
from data_tools.pipeline.shards import write_shard
from data_tools.pipeline.spm.layouts import LAYOUTS


@dataclass
class Fixtures:
    corpus: Path
    corpus_text: Path
    gpt2: Path  # a tiny GPT-2 source
    weightless: Path  # the tiny RoBERTa source without its weights: a case that uses it must fail before the load


def unknown_key(cfg, d, fx):
    cfg["model"]["sourc"] = "x"
    return [], ["'model.sourc'"]


def unknown_override_key(cfg, d, fx):
    return ["--optim.micro_batch=4"], ["'optim.micro_batch'"]


def wrong_type(cfg, d, fx):
    cfg["optim"]["micro_batch_size"] = "8"
    return [], ["'optim.micro_batch_size'", "int"]


def wrong_type_bool_as_int(cfg, d, fx):
    cfg["optim"]["torch_adam"] = 1
    return [], ["'optim.torch_adam'", "bool"]


def missing_source_model(cfg, d, fx):
    cfg["model"]["source"] = str(d / "no_such_model")
    return [], ["'model.source': no such directory", str(d / "no_such_model")]


def source_without_config_json(cfg, d, fx):
    """A directory with the weights but no config.json (a copy that left it out), not a config that lacks a key."""
    src = d / "no_config"
    shutil.copytree(fx.weightless, src)
    (src / "config.json").unlink()
    cfg["model"]["source"] = str(src)
    return [], [f"'model.source': {src} has no config.json (a model directory holds it beside the weights"]


def source_with_its_own_code(cfg, d, fx):
    """A stock model_type whose config.json names its own model code, with a weight of that code's layers."""
    from safetensors.torch import load_file, save_file
    src = d / "own_code"
    shutil.copytree(cfg["model"]["source"], src)
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModelForMaskedLM": "m.XForMaskedLM"}}))
    state = load_file(src / "model.safetensors")
    save_file({**state, "roberta.encoder.layer.0.glu.weight": state["lm_head.bias"].clone()},
              src / "model.safetensors", metadata={"format": "pt"})
    cfg["model"]["source"] = str(src)
    return [], [f"'model.source': {src} holds 1 weight(s) the stock RobertaForMaskedLM does not use",
                "AutoModelForMaskedLM -> m.XForMaskedLM"]


def missing_tokenizer_file(cfg, d, fx):
    cfg["model"]["tokenizer"] = str(d / "missing.model")
    return [], ["'model.tokenizer'", str(d / "missing.model")]


def _train_spm(text: Path, prefix: Path, vocab_size: int = 260, **special) -> str:
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(prefix), vocab_size=vocab_size,
                                   hard_vocab_limit=False, num_threads=1, minloglevel=2, **special)
    return str(prefix.with_suffix(".model"))


def tokenizer_with_default_special_ids(cfg, d, fx):
    cfg["model"]["tokenizer"] = _train_spm(fx.corpus_text, d / "spm")
    return [], [cfg["model"]["tokenizer"], "pad"]


def tokenizer_without_mask_piece(cfg, d, fx):
    cfg["model"]["tokenizer"] = _train_spm(fx.corpus_text, d / "spm", pad_id=3)
    return [], [cfg["model"]["tokenizer"], "mask"]


def tokenizer_smaller_than_corpus_vocab(cfg, d, fx):
    (d / "english.txt").write_text("\n".join(f"the quick brown fox {i} jumps over the lazy dog" for i in range(300)))
    cfg["model"]["tokenizer"] = _train_spm(d / "english.txt", d / "spm", 60, **LAYOUTS["roberta"])
    return [], [cfg["model"]["tokenizer"]]


def trainable_pattern_matching_nothing(cfg, d, fx):
    cfg["phases"][0]["trainable"] = ["nope\\..*"]
    cfg["model"]["source"] = str(fx.weightless)  # patterns are checked before any source weight is read
    return [], ["'phases[0].trainable'", "'nope\\..*'"]


def _ds_json(cfg, d, ds: dict) -> str:
    cfg["deepspeed"] = str(d / "ds.json")
    (d / "ds.json").write_text(json.dumps(ds))
    return cfg["deepspeed"]


def ds_json_sets_train_batch_size(cfg, d, fx):
    path = _ds_json(cfg, d, {"zero_optimization": {"stage": 2}, "train_batch_size": 8})
    return [], [path, "'train_batch_size'"]


def ds_json_sets_optimizer_lr(cfg, d, fx):
    path = _ds_json(cfg, d, {"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
    return [], [path, "'optimizer'"]


def ds_json_bf16_at_stage0(cfg, d, fx):
    path = _ds_json(cfg, d, {"zero_optimization": {"stage": 0}, "bf16": {"enabled": True}})
    return [], [path, "bf16", "stage"]


def ds_json_fp16_at_stage0(cfg, d, fx):
    path = _ds_json(cfg, d, {"fp16": {"enabled": True}})
    return [], [path, "fp16 needs ZeRO stage >= 1"]


def _fp16_on_this_cpu() -> bool:
    """DeepSpeed's CPU accelerator has fp16 where oneDNN does (AVX512-FP16): there fp16 trains, and is no error
    (tests/training/test_guards.py trains it)."""
    import deepspeed
    return bool(deepspeed.get_accelerator().is_fp16_supported())


def ds_json_fp16_on_cpu(cfg, d, fx):
    path = _ds_json(cfg, d, {"zero_optimization": {"stage": 1}, "fp16": {"enabled": True}})
    return [], [path, "fp16.enabled", "cpu accelerator does not support fp16"]


def ds_json_nvme_offload_without_path(cfg, d, fx):
    path = _ds_json(cfg, d, {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})
    return [], [path, "zero_optimization.offload_param.nvme_path is not set"]


def ds_json_round_robin_gradients(cfg, d, fx):
    """Trained on misplaced weights from the first step (a loss of 5.22 at step 2 where the run has 5.27)."""
    path = _ds_json(cfg, d, {"zero_optimization": {"stage": 2, "round_robin_gradients": True}})
    return [], [path, "zero_optimization.round_robin_gradients is true", "leave it false"]


def ds_json_section_not_an_object(cfg, d, fx):
    """Was an AttributeError traceback (engine_json.precision) that left the run directory behind."""
    path = _ds_json(cfg, d, {"zero_optimization": {"stage": 2}, "bf16": True})
    return [], [path, "bf16 must be an object, got true"]


def keep_vocab_on_a_decoder_without_tokenizer(cfg, d, fx):
    """Continued pretraining reads the source's own tokenizer, which this source directory lacks."""
    cfg["model"].update(source=str(fx.gpt2), method="keep_vocab", tokenizer="")
    return [], ["'model.source'", "cannot load a Hugging Face tokenizer", "holds no tokenizer files"]


def span_masking_on_a_decoder(cfg, d, fx):
    """Was ignored: a decoder trains on every next token."""
    cfg["model"]["source"] = str(fx.gpt2)
    cfg["data"]["masking"] = "span"
    return [], ["'data.masking' is 'span'", "decoder"]


def mask_prob_on_a_decoder(cfg, d, fx):
    """Was accepted, and trained bit for bit as without it (a review, 2026-12-05)."""
    cfg["model"]["source"] = str(fx.gpt2)
    cfg["data"]["mask_prob"] = 0.5
    return [], ["'data.mask_prob' is 0.5", "decoder"]


def missing_shard(cfg, d, fx):
    cfg["model"]["source"] = str(fx.weightless)  # the shards are checked before any source weight is read
    shutil.copytree(fx.corpus, d / "corpus")
    manifest = json.loads((d / "corpus/manifest.json").read_text())
    shard = d / "corpus" / manifest["splits"]["train"]["shards"][0]
    shard.unlink()
    cfg["data"]["train_shards"] = [f"{d}/corpus/manifest.json:train"]
    return [], [str(shard)]


def corpus_directory_as_shards(cfg, d, fx):
    """Read "shard not found: DIR", as if the path were mistyped."""
    cfg["model"]["source"] = str(fx.weightless)
    cfg["data"]["train_shards"] = [str(fx.corpus)]
    return [], [f"shard {fx.corpus} is a directory, not a file (a prepared corpus: give {fx.corpus}/manifest.json:"]


def corrupt_shard(cfg, d, fx):
    cfg["model"]["source"] = str(fx.weightless)
    shutil.copytree(fx.corpus, d / "corpus")
    shard = d / "corpus" / json.loads((d / "corpus/manifest.json").read_text())["splits"]["train"]["shards"][0]
    shard.write_bytes(shard.read_bytes()[:1500])
    cfg["data"]["train_shards"] = [str(shard)]
    return [], [str(shard)]


def out_of_vocabulary_shard(cfg, d, fx):
    """The bad shard is the second of the set: the scan of the shards finds the id, and the error must name it
    (not the first shard). (A shard that breaks after the scan fails in a DataLoader worker, with the worker's
    own message: tests/data/test_shard_scan.py.)"""
    assert "num_workers" not in cfg["data"]  # the default, 2
    bad = d / "oov-000000.tar"
    write_shard(bad, "train", 0, [[[5, 6, 7, 60000, 8]]] * 4, vocab_size=65536)
    cfg["data"]["train_shards"] = [f"{fx.corpus}/manifest.json:train", str(bad)]
    cfg["model"]["source"] = str(fx.weightless)
    return [], [str(bad), "60000"]


def seq_len_past_the_source_positions(cfg, d, fx):
    cfg["model"]["source"] = str(fx.weightless)  # from config.json alone
    cfg["data"]["seq_len"] = 4096
    return [], ["'data.seq_len' is 4096", "at most 78"]


def profile_rank_past_the_job(cfg, d, fx):
    cfg["profile"] = {"start_step": 2, "ranks": [0, 1]}  # the job has one rank
    return [], ["config key 'profile.ranks' names rank 1, but this job has 1 rank (0)"]


def run_dir_under_a_file(cfg, d, fx):
    (d / "a_file").write_text("x")
    cfg["run_dir"] = str(d / "a_file" / "run")
    return [], ["'run_dir'", str(d / "a_file" / "run"), f"{d / 'a_file'} is a file, not a directory"]


def tensorboard_dir_is_a_file(cfg, d, fx):
    """Was 'File exists', naming neither the setting nor the way around it, after the model's build."""
    cfg["model"]["source"] = str(fx.weightless)  # checked before any source weight is read
    (d / "run").mkdir()
    (d / "run" / "tb").write_text("x")
    return [], ["'logging.tensorboard'", f"{d / 'run' / 'tb'} is a file, not a directory",
                "--logging.tensorboard=false"]


def phase_with_zero_steps(cfg, d, fx):
    return ["--phases.1.steps=0"], ["'phases[1].steps'"]


CASES = {f.__name__: f for f in [
    corrupt_shard, phase_with_zero_steps, out_of_vocabulary_shard, run_dir_under_a_file, tensorboard_dir_is_a_file,
    unknown_key, unknown_override_key, wrong_type, wrong_type_bool_as_int, missing_source_model,
    source_without_config_json, source_with_its_own_code,
    missing_tokenizer_file, tokenizer_with_default_special_ids, tokenizer_without_mask_piece,
    trainable_pattern_matching_nothing, ds_json_sets_train_batch_size, ds_json_sets_optimizer_lr,
    ds_json_bf16_at_stage0, ds_json_fp16_at_stage0, ds_json_fp16_on_cpu,
    ds_json_nvme_offload_without_path, ds_json_round_robin_gradients, ds_json_section_not_an_object, missing_shard,
    corpus_directory_as_shards,
    tokenizer_smaller_than_corpus_vocab, keep_vocab_on_a_decoder_without_tokenizer, span_masking_on_a_decoder,
    mask_prob_on_a_decoder,
    seq_len_past_the_source_positions, profile_rank_past_the_job]}


NOT_BAD_HERE = {"ds_json_fp16_on_cpu": "this CPU has fp16 (oneDNN with AVX512-FP16): fp16 trains here"} \
    if _fp16_on_this_cpu() else {}


def _free_ports(n: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, tiny_roberta, corpus, corpus_text, tiny_decoder):
    """name -> (CompletedProcess, culprits); the launches run concurrently to keep the module fast."""
    fx = Fixtures(corpus, corpus_text, tiny_decoder("gpt2", True),
                  config_only(tiny_roberta, tmp_path_factory.mktemp("weightless") / "source"))
    jobs = {}
    cases = {name: build for name, build in CASES.items() if name not in NOT_BAD_HERE}
    for (name, build), port in zip(cases.items(), _free_ports(len(cases))):
        d = tmp_path_factory.mktemp(name)
        cfg = base_config(d / "run", tiny_roberta, corpus)
        args, culprits = build(cfg, d, fx)
        argv = ["--config", str(write_config(d / "run.yaml", cfg)), *args]
        jobs[name] = (argv, {"MASTER_PORT": str(port)}, culprits)
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(launch, argv, 1, 180, env) for name, (argv, env, _) in jobs.items()}
        return {name: (futures[name].result(), jobs[name][2]) for name in jobs}


def error_line(proc: subprocess.CompletedProcess) -> str:
    tail = "\n".join(proc.stderr.splitlines()[-12:])
    traceback = "Traceback" in proc.stderr
    assert not traceback, tail
    assert proc.returncode == 2, tail
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines, proc.stdout[-2000:]
    assert lines[-1].startswith("error:"), tail
    return lines[-1]


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.skipif(name in NOT_BAD_HERE,
                                                                               reason=NOT_BAD_HERE.get(name, "")))
                                  for name in CASES])
def test_bad_input_is_one_line_error_naming_culprit(outcomes, name):
    proc, culprits = outcomes[name]
    line = error_line(proc)
    for culprit in culprits:
        assert culprit in line, line
    run = Path(proc.args[2]).parent / "run"  # --config d/run.yaml, run_dir d/run: a new run that never started
    if name == "tensorboard_dir_is_a_file":  # a run directory that was there before: its status says why
        assert json.loads((run / "status.json").read_text())["error"] == line.removeprefix("error: ")
        assert not any((run / "checkpoints").iterdir()) and (run / "tb").read_text() == "x"
    else:
        assert not run.exists() or name == "run_dir_under_a_file", sorted(run.rglob("*"))  # leaves no directory


def test_tensorboard_that_cannot_be_imported_is_named_with_the_way_around_it(monkeypatch, tmp_path):
    """Was an ImportError traceback on rank 0 once the model was built (and 'lost another rank' on the others)."""
    import sys
    from xpt_ds.metrics.logger import logging_problem
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    why = logging_problem(tmp_path, True)
    assert why.startswith("config key 'logging.tensorboard' is true, but TensorBoard cannot be imported (") and \
        why.endswith("install tensorboard, or set --logging.tensorboard=false") and "\n" not in why
    assert logging_problem(tmp_path, False) is None and not (tmp_path / "tb").exists()


# ---- the other entry points ----

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_roberta, corpus) -> Path:
    d = tmp_path_factory.mktemp("finished")
    cfg = base_config(d / "run", tiny_roberta, corpus)
    cfg["phases"] = [{**p, "steps": 1} for p in cfg["phases"]]
    proc = launch(["--config", str(write_config(d / "run.yaml", cfg))], 1, 300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d / "run"


def _tool_cases(run: Path, corpus: Path, d: Path, no_tokenizer: Path) -> dict:
    """name -> (module argv, culprits); ``no_tokenizer``: a model directory without tokenizer files, for which
    transformers 5 builds a tokenizer of 5 special tokens instead of failing."""
    (d / "a_file").write_text("x")
    blocked = d / "a_file" / "sub"
    (d / "broken.yaml").write_text("model: {source: [unclosed\n")
    (d / "bad.jsonl").write_text('{"text": "a", "label": 0}\nnot json\n')
    text = write_synthetic_corpus(d / "docs.txt")
    (d / "ok.jsonl").write_text("".join(f'{{"text": "word {i}", "label": {i % 2}}}\n' for i in range(8)))
    valid = f"{corpus}/manifest.json:valid"
    (d / "typeless").mkdir()
    (d / "typeless" / "config.json").write_text('{"architectures": ["RobertaForMaskedLM"]}')  # was a traceback
    return {
        "evaluate_config_without_model_type": (["xpt_ds.cli.evaluate", "--model", str(d / "typeless"), "--shards",
                                                valid], [str(d / "typeless"), "config.json has no model_type"]),
        "export_out_unwritable": (["xpt_ds.cli.export", "--run", str(run), "--out", str(blocked)], [str(blocked)]),
        "export_missing_run": (["xpt_ds.cli.export", "--run", str(d / "no_run"), "--out", str(d / "x")],
                               ["no such run directory", str(d / "no_run")]),
        "evaluate_out_unwritable": (["xpt_ds.cli.evaluate", "--run", str(run), "--shards", valid, "--out",
                                     str(blocked / "m.json")], ["--out", str(blocked / "m.json")]),
        "evaluate_missing_shards": (["xpt_ds.cli.evaluate", "--run", str(run), "--shards", str(d / "none.tar")],
                                    [str(d / "none.tar")]),
        "probe_missing_source_text": (["xpt_ds.cli.probe", "--run", str(run), "--source-text", str(d / "none.txt")],
                                      [str(d / "none.txt")]),
        "probe_out_unwritable": (["xpt_ds.cli.probe", "--run", str(run), "--source-text", str(d / "broken.yaml"),
                                  "--out", str(blocked / "p.json")], ["--out", str(blocked / "p.json")]),
        "finetune_missing_train_file": (["xpt_ds.cli.finetune", "--model", str(d / "no_model"), "--train",
                                         str(d / "none.jsonl"), "--test", str(d / "none.jsonl"), "--out",
                                         str(d / "ft")], [str(d / "none.jsonl")]),
        "finetune_out_unwritable": (["xpt_ds.cli.finetune", "--model", str(run), "--train", str(d / "bad.jsonl"),
                                     "--test", str(d / "bad.jsonl"), "--out", str(blocked)], [str(blocked)]),
        "sweep_broken_yaml": (["xpt_ds.cli.sweep", "--config", str(d / "broken.yaml"), "--methods", "xpt", "--sizes",
                               "10", "--out", str(d / "sweep")], [str(d / "broken.yaml")]),
        "prepare_missing_input": (["data_tools.cli.prepare", "--input", str(d / "none.txt"), "--out", str(d / "p")],
                                  [str(d / "none.txt")]),
        "prepare_out_unwritable": (["data_tools.cli.prepare", "--input", str(d / "broken.yaml"), "--out", str(blocked)],
                                   [str(blocked)]),
        "prepare_hf_tokenizer_without_files": (["data_tools.cli.prepare", "--input", str(text), "--out",
                                                str(d / "p2"), "--hf-tokenizer", str(no_tokenizer)],
                                               [str(no_tokenizer), "no tokenizer files"]),
        "finetune_model_without_tokenizer": (["xpt_ds.cli.finetune", "--model", str(no_tokenizer), "--train",
                                              str(d / "ok.jsonl"), "--test", str(d / "ok.jsonl"), "--out",
                                              str(d / "ft2")], [str(no_tokenizer), "no tokenizer files"]),
        "probe_source_without_tokenizer": (["xpt_ds.cli.probe", "--run", str(run), "--source-text", str(d / "ok.jsonl"),
                                            "--source", str(no_tokenizer)],
                                           ["--source", str(no_tokenizer), "no tokenizer files"]),
    }


@pytest.fixture(scope="module")
def tool_outcomes(tmp_path_factory, finished_run, corpus, tiny_roberta):
    d = tmp_path_factory.mktemp("tools")
    cases = _tool_cases(finished_run, corpus, d, tiny_roberta)
    elsewhere = tmp_path_factory.mktemp("cwd")  # not the checkout
    # Each tool's main in a forked child (processes.run_main): a new interpreter per case took 0.3-10 CPU-s, 9 of
    # the 11 over 3, mostly imports; the console commands start from another directory in tests/launch/test_install.py.
    return {name: (run_main(argv[0], argv[1:], timeout=300, cwd=elsewhere), culprits)
            for name, (argv, culprits) in cases.items()}


TOOL_CASES = ["export_out_unwritable", "export_missing_run", "evaluate_out_unwritable", "evaluate_missing_shards",
              "probe_missing_source_text", "probe_out_unwritable", "finetune_missing_train_file",
              "finetune_out_unwritable", "sweep_broken_yaml", "prepare_missing_input", "prepare_out_unwritable",
              "prepare_hf_tokenizer_without_files", "finetune_model_without_tokenizer",
              "probe_source_without_tokenizer", "evaluate_config_without_model_type"]


@pytest.mark.parametrize("name", TOOL_CASES)
def test_every_entry_point_gives_one_error_line(tool_outcomes, name):
    proc, culprits = tool_outcomes[name]
    line = error_line(proc)
    for culprit in culprits:
        assert culprit in line, line


def test_resume_with_another_model_is_one_line(finished_run, tmp_path):
    """A run directory resumed with a config that builds another model (here model.method xpt_no_itl, two layers
    fewer than the checkpoint's xpt) is one line naming what differs, not DeepSpeed's load with every key."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    cfg = yaml.safe_load((finished_run.parent / "run.yaml").read_text())
    cfg["run_dir"] = str(run)
    cfg["model"]["method"] = "xpt_no_itl"
    cfg["phases"][1]["steps"] += 1
    before = {**json.loads((run / "status.json").read_text()), "updated": "2000-01-01T00:00:00+0000"}
    (run / "status.json").write_text(json.dumps(before))
    line = error_line(launch(["--config", str(write_config(tmp_path / "run.yaml", cfg))], 1, 300))
    assert "num_hidden_layers 4 -> 2" in line and "model.method" in line, line
    after = json.loads((run / "status.json").read_text())
    assert after["state"] == "failed" and after["error"] == line.removeprefix("error: ")  # was still 'finished'
    assert after["global_step"] == before["global_step"] == 2 and after["last_complete_checkpoint"] == \
        before["last_complete_checkpoint"]
    assert after["updated"] != before["updated"]  # when it failed, not when the run it resumed finished


def test_a_resume_with_other_lengths_says_what_it_does(finished_run, tmp_path):
    """A 32 -> 64 resume (a short-then-long schedule) is allowed, and continues the data stream at the token where
    it stopped (8 sequences of 30 tokens: 240), not at sequence 8 of the longer ones (token 496); a resume with a
    phase shortened below the steps it took, or with another data stream (data.seed), says so."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    cfg = yaml.safe_load((finished_run.parent / "run.yaml").read_text())
    cfg["run_dir"], cfg["data"]["seq_len"] = str(run), 64
    cfg["phases"][1]["steps"] += 1
    proc = launch(["--config", str(write_config(tmp_path / "run.yaml", cfg))], 1, 300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "data.seq_len 32 -> 64: the data stream stopped at token 240 (sequence 8) and continues at token 248 " \
        "(sequence 4 at the new length)" in proc.stderr, proc.stderr[-3000:]
    assert "other data settings" not in proc.stderr  # the length alone is converted, not a change of stream
    cfg["phases"][1]["steps"] = 1  # now shorter than the 2 steps phase 2 took: said, not silently 'finished'
    cfg["data"]["seed"] = 1  # another stream: said too
    proc = launch(["--config", str(write_config(tmp_path / "run.yaml", cfg))], 1, 300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "is at step 2 of phase 'phase2', past its phases[1].steps=1: that phase ends here" in proc.stderr
    assert "with other data settings than it was trained with (data.seed 0 -> 1)" in proc.stderr


@pytest.mark.parametrize("argv, culprit", [
    (["xpt_ds.cli.evaluate", "--model", "m", "--shards", "s", "--seq-len", "2"], "--seq-len must be >= 8, got 2"),
    (["xpt_ds.cli.evaluate", "--model", "m", "--shards", "s", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["xpt_ds.cli.evaluate", "--model", "m", "--shards", "s", "--max-batches", "-1"], "--max-batches must be >= 0"),
    (["xpt_ds.cli.evaluate", "--model", "m", "--shards", "s", "--seed", "-5"], "--seed must be >= 0, got -5"),
    (["xpt_ds.cli.evaluate", "--model", "m", "--shards", "s", "--tag", "t"], "--tag picks a checkpoint of --run"),
    (["xpt_ds.cli.probe", "--run", "r", "--source-text", "t", "--batch-size", "0"], "--batch-size >= 1"),
    (["data_tools.cli.prepare", "--input", "t", "--out", "o", "--workers", "x"], "error: xpt-data prepare: argument"),
    *[(["xpt_ds.cli.sweep", "--config", "c", "--methods", "xpt", "--sizes", "1", "--out", "o", *extra], culprit)
      for extra, culprit in [(["--eval-batch-size", "0"], "--eval-batch-size must be >= 1, got 0"),
                             (["--eval-max-batches", "-1"], "--eval-max-batches must be >= 0 (0 = all), got -1"),
                             (["--sizes", "inf", "--dry-run"], "error: size 'inf' is not a number")]],
])
def test_numeric_flags_out_of_range_are_usage_errors(argv, culprit):
    """Were a ZeroDivisionError traceback (--seq-len 2, --batch-size 0) or an empty result with exit 0; prepare
    without a stage named the implied one ('xpt-data prepare all: error:'); a sweep took --eval-batch-size 0 and
    failed only once each run had trained, and --sizes inf was an OverflowError traceback."""
    proc = run_main(argv[0], argv[1:])
    assert proc.returncode == 2 and culprit in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
