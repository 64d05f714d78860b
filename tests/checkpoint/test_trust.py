"""What xpt-ds runs from files it did not write: a model directory's Python only by identity (byte-identical to
xpt-ds's own export code) or with ``--trust-remote-code``; a checkpoint's pickles never, unless
``checkpoint.allow_pickle`` / ``--allow-pickle``. Every refusal is one ``error:`` line and leaves the
attacker's marker file unwritten. Checkpoints written before plain-data RNG files still resume."""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import REPO, base_config, launch, read_metrics, run_main, write_config
from xpt_ds.checkpoint.store import read_client_state
from xpt_ds.checkpoint.tags import CheckpointError
from xpt_ds.io import trust

FIXTURE = REPO / "tests/fixtures/checkpoint_before_safe_load"
OLD_TAG = "global_step000000002"


class RunsCode:
    """Unpickling this writes ``marker``: what a hostile checkpoint file does."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def _evil_code(marker: Path) -> str:
    return (f"open({str(marker)!r}, 'w').write('ran')\n"
            "from transformers import RobertaConfig, RobertaForMaskedLM, RobertaForSequenceClassification\n"
            "class EvilConfig(RobertaConfig):\n    pass\n"
            "class EvilForMaskedLM(RobertaForMaskedLM):\n    config_class = EvilConfig\n"
            "class EvilForSequenceClassification(RobertaForSequenceClassification):\n    config_class = EvilConfig\n")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_roberta, corpus) -> Path:
    """An export-shaped directory: a tiny masked LM, tokenizer.json and spm.model, no code."""
    from transformers import AutoModelForMaskedLM

    from xpt_ds.data.tokenizer import build_tokenizer, save_hf_tokenizer
    out = tmp_path_factory.mktemp("export")
    tok = build_tokenizer(str(corpus / "spm.model"))
    model = AutoModelForMaskedLM.from_pretrained(tiny_roberta)
    model.resize_token_embeddings(tok.vocab_size)
    model.config.pad_token_id = tok.pad_id
    model.config.xpt_max_length = 32  # what xpt_ds.cli.export records: the positions evaluate may use
    model.save_pretrained(out)
    save_hf_tokenizer(tok, out, model_max_length=64, token_types=1)
    return out


def _with_code(model_dir: Path, out: Path, code: str, module: str = "evil") -> Path:
    """``model_dir`` plus ``module``.py, mapped in config.json's auto_map for the config and two heads."""
    shutil.copytree(model_dir, out)
    (out / f"{module}.py").write_text(code)
    cfg = json.loads((out / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": f"{module}.EvilConfig", "AutoModelForMaskedLM": f"{module}.EvilForMaskedLM",
                       "AutoModelForSequenceClassification": f"{module}.EvilForSequenceClassification"}
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def _cli(module: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` in a process of its own (``run_main``): the marker a refused directory's code
    would write is checked in a process that never ran that code."""
    return run_main(module, list(args), timeout=300)


def _one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def test_evaluate_refuses_a_directory_that_ships_foreign_code(tmp_path, model_dir, corpus):
    marker = tmp_path / "ran"
    evil = _with_code(model_dir, tmp_path / "evil_model", _evil_code(marker))
    shards = f"{corpus}/manifest.json:test"
    proc = _cli("xpt_ds.cli.evaluate", "--model", str(evil), "--shards", shards, "--max-batches", "1")
    _one_error_line(proc, "evil.py", "--trust-remote-code")
    assert not marker.exists()
    proc = _cli("xpt_ds.cli.evaluate", "--model", str(evil), "--shards", shards, "--max-batches", "1",
                "--trust-remote-code")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert marker.exists() and json.loads(proc.stdout)["tokens"] > 0  # the flag loads it, and so runs it


def test_finetune_refuses_a_directory_that_ships_foreign_code(tmp_path, model_dir):
    marker = tmp_path / "ran"
    evil = _with_code(model_dir, tmp_path / "evil_model", _evil_code(marker))
    rows = [{"text": t, "label": t[0]} for t in ("a b", "b a", "a a", "b b")]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["--model", str(evil), "--train", str(data), "--test", str(data), "--out", str(tmp_path / "ft"),
            "--epochs", "1", "--seeds", "1", "--batch-size", "4"]
    _one_error_line(_cli("xpt_ds.cli.finetune", *args), "evil.py", "--trust-remote-code")
    assert not marker.exists()
    proc = _cli("xpt_ds.cli.finetune", *args, "--trust-remote-code")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert marker.exists() and (tmp_path / "ft/results.json").is_file()


@pytest.mark.parametrize("own", ["xpt_adapters.py", "xpt_trelm.py"])
def test_own_export_code_is_trusted_by_identity_only(tmp_path, model_dir, own):
    """A byte-identical copy of the code xpt-ds exports needs no flag; one changed byte does."""
    code = trust.OWN_CODE[own].read_text()
    same = _with_code(model_dir, tmp_path / "same", code, module=own[:-3])
    assert trust.remote_code_files(str(same)) == [own]
    assert trust.remote_code_consent(str(same)) is True
    changed = _with_code(model_dir, tmp_path / "changed", code + "\n", module=own[:-3])
    with pytest.raises(trust.UntrustedError, match=f"{own} is not the code this xpt-ds exports.*--trust-remote"):
        trust.remote_code_consent(str(changed))
    assert trust.remote_code_consent(str(changed), trust_remote_code=True) is True
    assert trust.remote_code_consent(str(model_dir)) is False  # no code: nothing to trust


def test_a_tokenizer_auto_map_and_code_in_another_repo_count_too(tmp_path, model_dir):
    d = tmp_path / "m"
    shutil.copytree(model_dir, d)
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    tok_cfg["auto_map"] = {"AutoTokenizer": ["x/y--tok.SlowTok", None]}
    (d / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    assert trust.remote_code_files(str(d)) == ["x/y--tok.py"]
    with pytest.raises(trust.UntrustedError, match="code from another repository"):
        trust.remote_code_consent(str(d))


def _copy_old_checkpoint(run: Path) -> Path:
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(FIXTURE / "checkpoints" / OLD_TAG, run / "checkpoints" / OLD_TAG)
    return run / "checkpoints" / OLD_TAG


def _old_config(root: Path, tiny_roberta: Path) -> Path:
    """The config the fixture was trained with (tests/fixtures/.../straight_run.json), in ``root``."""
    corpus = FIXTURE / "corpus"
    cfg = base_config(root / "run", tiny_roberta, corpus, deepspeed=str(REPO / "ds_configs/zero1_fp32.json"),
                      checkpoint={"every_steps": 2, "keep_last": 10},
                      phases=[{"name": "phase1", "steps": 3, "lr": 1e-3, "warmup_steps": 1},
                              {"name": "phase2", "steps": 2, "lr": 5e-4, "warmup_steps": 1}])
    cfg["logging"]["tensorboard"] = False
    return write_config(root / "cfg.yaml", cfg)


def test_a_checkpoint_written_before_plain_rng_files_still_resumes(tmp_path, tiny_roberta):
    """The fixture was saved mid-phase-1 (step 2 of 3 + 2) by the code before issue 19: its rank_state holds
    numpy's RNG as an ndarray. It resumes without any flag, and the steps after it give the losses of the run
    that wrote it (restored weights, Adam state, data position and dropout RNG). Bit-equal on the machine
    that wrote the fixture; CPUs with other vector units may round differently, hence the 1e-6 bound."""
    old = _copy_old_checkpoint(tmp_path / "run")
    assert "numpy._core.multiarray._reconstruct" in " ".join(
        torch.serialization.get_unsafe_globals_in_checkpoint(str(old / "rank_state_00000.pt")))
    proc = launch(["--config", str(_old_config(tmp_path, tiny_roberta))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = json.loads((FIXTURE / "straight_run.json").read_text())["train_loss"]
    got = {s: r["train/loss"] for s, r in read_metrics(tmp_path / "run").items() if "train/loss" in r}
    assert sorted(got) == [3, 4, 5]
    for step, loss in got.items():
        assert loss == pytest.approx(want[str(step)], rel=1e-6, abs=0), (step, loss, want[str(step)])
    new = tmp_path / "run/checkpoints/global_step000000005"
    for f in new.glob("*.pt"):  # what this code writes is plain data, with no allowlist at all
        assert torch.serialization.get_unsafe_globals_in_checkpoint(str(f)) == [] or "optim_states" in f.name, f


@pytest.mark.parametrize("victim", ["mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                    "rank_state_00000.pt"])
def test_a_checkpoint_file_that_runs_code_is_refused(tmp_path, tiny_roberta, victim):
    """The client state (in DeepSpeed's model-states file), DeepSpeed's own optimizer file and the RNG file:
    each, made to run code when unpickled, stops resume and export with one line; nothing runs."""
    marker = tmp_path / "ran"
    tag_dir = _copy_old_checkpoint(tmp_path / "run")
    blob = torch.load(tag_dir / victim, map_location="cpu", weights_only=False)
    blob["hostile"] = RunsCode(marker)
    torch.save(blob, tag_dir / victim)

    proc = launch(["--config", str(_old_config(tmp_path, tiny_roberta))])
    _one_error_line(proc, victim, "not plain data", "checkpoint.allow_pickle")
    export = _cli("xpt_ds.cli.export", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "out"))
    _one_error_line(export, victim, "--allow-pickle")
    assert not marker.exists()
    trust.load_plain(tag_dir / victim, allow_pickle=True)  # the consent path does unpickle it: the file is real
    assert marker.read_text() == "ran"


def test_a_refused_resume_from_an_older_tag_leaves_the_later_checkpoints_where_they_were(tmp_path, tiny_roberta):
    """``--resume TAG`` starts a new branch, which moves the later checkpoints aside, only once TAG has loaded: a
    refused one leaves ``resume: auto`` continuing from the newest, as before the attempt."""
    from xpt_ds.checkpoint.tags import complete_tags, tag_for
    tag_dir = _copy_old_checkpoint(tmp_path / "run")
    config = _old_config(tmp_path, tiny_roberta)
    assert launch(["--config", str(config)]).returncode == 0  # from step 2 to the end: steps 3, 4 and 5 saved
    newest = complete_tags(tmp_path / "run/checkpoints")
    assert newest[-1] == tag_for(5) and len(newest) > 1
    blob = torch.load(tag_dir / "rank_state_00000.pt", map_location="cpu", weights_only=False)
    torch.save({**blob, "hostile": RunsCode(tmp_path / "ran")}, tag_dir / "rank_state_00000.pt")
    _one_error_line(launch(["--config", str(config), "--resume", OLD_TAG]), "rank_state_00000.pt", "not plain data")
    assert complete_tags(tmp_path / "run/checkpoints") == newest
    assert not (tmp_path / "run/checkpoints/abandoned").exists() and not (tmp_path / "ran").exists()


def _frozen_as_today(tag_dir: Path) -> Path:
    """The fixture's frozen weights in today's file, ``frozen_fp32.safetensors``, in place of its older ``.pt``."""
    from safetensors.torch import save_file
    old = tag_dir / "frozen_fp32.pt"
    save_file(torch.load(old, map_location="cpu", weights_only=True), str(tag_dir / "frozen_fp32.safetensors"))
    old.unlink()
    return tag_dir / "frozen_fp32.safetensors"


@pytest.mark.parametrize("victim,garbage", [("zero_pp_rank_0_mp_rank_00_optim_states.pt", False),
                                            ("mp_rank_00_model_states.pt", False), ("frozen_fp32.pt", True),
                                            ("frozen_fp32.safetensors", False)])
def test_a_truncated_checkpoint_file_is_one_line_naming_the_checkpoint(tmp_path, tiny_roberta, victim, garbage):
    """The optimizer file, or the model-states file the trainer reads the client state from before any other, cut
    short; a file overwritten with text (which tripped torch's unpickler with a KeyError); today's frozen weights
    file cut short (safetensors raised its own error, a traceback): one line naming the checkpoint and the file,
    not calling it code, and status.json says the run failed."""
    tag_dir = _copy_old_checkpoint(tmp_path / "run")
    if victim.endswith(".safetensors"):
        _frozen_as_today(tag_dir)
    f = tag_dir / victim
    f.write_bytes(b"junk\n" if garbage else f.read_bytes()[:1000])
    line = _one_error_line(launch(["--config", str(_old_config(tmp_path, tiny_roberta))]), "cannot read checkpoint",
                           OLD_TAG, victim)
    assert "allow" not in line
    status = json.loads((tmp_path / "run/status.json").read_text())
    assert status["state"] == "failed" and status["error"] == line[len("error: "):]


def _damaged(model_dir: Path, out: Path, damage: str, marker: Path) -> Path:
    """``model_dir`` with its weights cut in half, or as a pytorch_model.bin pickle that runs code."""
    shutil.copytree(model_dir, out)
    weights = out / "model.safetensors"
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        from safetensors.torch import load_file
        state = {**load_file(str(weights)), "hostile": RunsCode(marker)}
        weights.unlink()
        torch.save(state, out / "pytorch_model.bin")
    return out


@pytest.mark.parametrize("damage", ["truncated", "pickle"])
def test_model_weights_cut_short_or_running_code_are_one_line_everywhere(tmp_path, model_dir, corpus, damage):
    """A model directory's weights that transformers cannot read, or a .bin pickle that would run code: as the
    run's source (a new run directory is removed; an existing one's status.json says failed), under evaluate
    --model, finetune --model and xpt-data source-embeddings --model, one line naming the directory; nothing runs."""
    marker = tmp_path / "ran"
    bad = _damaged(model_dir, tmp_path / "bad", damage, marker)
    needle = "cannot read its weights" if damage == "truncated" else "not plain data and would run code"
    cfg = write_config(tmp_path / "cfg.yaml", base_config(tmp_path / "run", bad, corpus))
    line = _one_error_line(run_main("xpt_ds.cli.train", ["--config", str(cfg)]), f"config key 'model.source': {bad}",
                           needle)
    assert not (tmp_path / "run").exists()  # a new run that never started leaves no run directory
    (tmp_path / "run").mkdir()  # one that exists (a sweep's, or a job script's log folder) says why it failed
    line = _one_error_line(run_main("xpt_ds.cli.train", ["--config", str(cfg)]), f"config key 'model.source': {bad}",
                           needle)
    assert json.loads((tmp_path / "run/status.json").read_text())["error"] == line[len("error: "):]
    _one_error_line(_cli("xpt_ds.cli.evaluate", "--model", str(bad), "--shards", f"{corpus}/manifest.json:test"),
                    f"--model {bad}", needle)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": t[0]}) + "\n" for t in ("a b", "b a", "a a", "b b")))
    _one_error_line(_cli("xpt_ds.cli.finetune", "--model", str(bad), "--train", str(data), "--test", str(data), "--out",
                         str(tmp_path / "ft"), "--epochs", "1", "--seeds", "1"), f"--model {bad}", needle)
    _one_error_line(_cli("data_tools.cli.source_embeddings", "--model", str(bad), "--out", str(tmp_path / "emb")),
                    f"{bad}: cannot load its weights")
    assert not marker.exists()


def test_client_state_of_the_fixture_reads_as_plain_data():
    client = read_client_state(FIXTURE / "checkpoints", OLD_TAG)
    assert client["trainer"]["global_step"] == 2 and client["data"] == {"sequences": 8}


PACKAGES = ("xpt_ds", "data_tools")
# The only calls that may load code: each sits behind a user flag or xpt_ds.io.trust's identity check.
CONSENTED = {("xpt_ds/io/trust.py", "load_plain", "weights_only"),  # weights_only=not allow_pickle
             ("xpt_ds/evaluation/intrinsic.py", "load_export", "trust_remote_code"),  # remote_code_consent
             ("xpt_ds/evaluation/text_bpb.py", "load_decoder", "trust_remote_code"),  # remote_code_consent
             ("xpt_ds/finetuning/run.py", "prepare", "trust_remote_code"),  # remote_code_consent
             ("xpt_ds/finetuning/run.py", "build_model", "trust_remote_code"),  # prepare's answer
             ("xpt_ds/finetuning/relation_model.py", "load_relation_model", "trust_remote_code")}  # remote_code_consent


def _keyword_calls():
    """(file, enclosing function, keyword, value node) of every call passing weights_only or trust_remote_code."""
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for fn in ast.walk(tree):
                if not isinstance(fn, ast.FunctionDef):
                    continue
                for call in ast.walk(fn):
                    if isinstance(call, ast.Call):
                        for kw in call.keywords:
                            if kw.arg in ("weights_only", "trust_remote_code"):
                                yield str(path.relative_to(REPO)), fn.name, kw.arg, kw.value


def test_no_code_path_loads_code_without_a_flag_or_an_identity_check():
    safe = {"weights_only": True, "trust_remote_code": False}
    loose = set()
    for path, fn, arg, value in _keyword_calls():
        if not (isinstance(value, ast.Constant) and value.value is safe[arg]):
            loose.add((path, fn, arg))
    assert loose == CONSENTED
    # load_plain's one torch.load: restricted exactly when the user did not consent (checkpoint.allow_pickle)
    assert [ast.unparse(value) for path, fn, arg, value in _keyword_calls() if fn == "load_plain"] == [
        "not allow_pickle"]
    for path, fn, arg in CONSENTED:
        source = ast.get_source_segment((REPO / path).read_text(), next(
            n for n in ast.walk(ast.parse((REPO / path).read_text()))
            if isinstance(n, ast.FunctionDef) and n.name == fn))
        assert any(gate in source for gate in ("not allow_pickle", "remote_code_consent", "prep.remote_code")), fn
    # no other way in: pickle.load(s), np.load(allow_pickle=True), a torch.load without the keyword
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            text = path.read_text()
            assert "pickle.load" not in text and "allow_pickle=True" not in text, path
            # the keywords are passed as keywords, never hidden in a **kwargs dict
            assert not re.search(r"""["'](trust_remote_code|weights_only)["']\s*[:\]]""", text), path
            for call in (n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)):
                if ast.unparse(call.func) == "torch.load":
                    assert any(k.arg == "weights_only" for k in call.keywords), (path, ast.unparse(call))
                # an Auto class reads the directory's auto_map: without the keyword transformers asks on the
                # terminal whether to run its code (a GGUF's tokenizer did until 2026-12-04), and a "y" runs it.
                # model_tokenizer passes on its callers' keyword, which the scan above checks.
                func = ast.unparse(call.func)
                if func.startswith("Auto") and func.endswith(".from_pretrained"):
                    passed = {k.arg for k in call.keywords}
                    assert "trust_remote_code" in passed or ast.unparse(call) == (
                        "AutoTokenizer.from_pretrained(location, **kw)"), (path, ast.unparse(call))


def test_a_gguf_beside_a_config_that_names_code_is_refused_without_asking(tmp_path):
    """transformers reads the tokenizer_config.json beside a GGUF file too; its auto_map made it ask on the
    terminal whether to run the code there, and a "y" ran it (until 2026-12-04). Now one line, nothing run."""
    from tiny_gguf import write_gguf

    from xpt_ds.io.gguf_tokenizer import load_gguf_tokenizer
    marker = tmp_path / "ran"
    (tmp_path / "m").mkdir()
    gguf = write_gguf(tmp_path / "m" / "tiny.gguf")
    (tmp_path / "m" / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                            "from transformers import PreTrainedTokenizerFast as EvilTok\n")
    (tmp_path / "m" / "tokenizer_config.json").write_text(json.dumps(
        {"auto_map": {"AutoTokenizer": ["evil.EvilTok", "evil.EvilTok"]}, "tokenizer_class": "EvilTok"}))
    with pytest.raises(trust.UntrustedError, match=rf"^{gguf}: {tmp_path / 'm' / 'tokenizer_config.json'} beside it "
                                                   r"names code to run \(auto_map\), .* a folder of its own$"):
        load_gguf_tokenizer(gguf)
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["cut", "list", "auto_map"])
def test_a_config_cut_short_or_of_another_shape_is_one_line(tmp_path, model_dir, damage):
    """evaluate's and finetune's check of a model directory's code read its JSON files as they came: a
    tokenizer_config.json cut short, a config.json holding a list, an auto_map entry that is an object were
    tracebacks (until 2026-12-04)."""
    d = tmp_path / "m"
    shutil.copytree(model_dir, d)
    name, text, why = {"cut": ("tokenizer_config.json", (d / "tokenizer_config.json").read_text()[:30],
                               "is not valid JSON"),
                       "list": ("config.json", "[1, 2]", "holds a JSON list, not an object"),
                       "auto_map": ("tokenizer_config.json", json.dumps({"auto_map": {"AutoTokenizer": {"a": 1}}}),
                                    "has an auto_map entry that is not a class reference")}[damage]
    (d / name).write_text(text)
    with pytest.raises(trust.UntrustedError, match=re.escape(f"{d / name} {why}")):
        trust.remote_code_consent(str(d))


def test_a_source_auto_map_does_not_reach_the_target(tmp_path, model_dir, tiny_decoder, corpus):
    """A source whose config.json maps code (never run: trust_remote_code=False) builds a target whose config,
    and so its checkpoints' and export's, names no code it does not carry."""
    from xpt_ds.config import ModelConfig
    from xpt_ds.data.tokenizer import build_tokenizer
    from xpt_ds.model.build import build_model
    for name, source in (("encoder", model_dir), ("decoder", tiny_decoder("llama", False))):
        mapped = shutil.copytree(source, tmp_path / name)
        cfg = json.loads((mapped / "config.json").read_text())
        cfg["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
        (mapped / "config.json").write_text(json.dumps(cfg))
        model_cfg = ModelConfig(source=str(mapped), tokenizer=str(corpus / "spm.model"))
        built = build_model(model_cfg, build_tokenizer(model_cfg.tokenizer))
        assert not hasattr(built.model.config, "auto_map") and "auto_map" not in built.model.config.to_dict()


def test_a_damaged_universal_copy_says_it_can_be_made_again_and_an_interrupted_conversion_is_not_read(tmp_path):
    """``TAG/universal/`` is derived data (a resume at another scale converts the tag into it): a file of it that
    cannot be read is one line that says to delete it. ``TAG/universal.tmp/`` is what a conversion killed mid-write
    (rank 0 preempted while resuming at another scale) left, half-written files included: never loaded, and removed
    by the next conversion, so the check does not read it, and the tag still resumes."""
    from xpt_ds.checkpoint.tag_checks import check_files

    tag_dir = _copy_old_checkpoint(tmp_path / "run")
    half = tag_dir / "universal.tmp/zero/hf.roberta.embeddings.word_embeddings.weight/exp_avg.pt"
    half.parent.mkdir(parents=True)
    torch.save({"param": torch.zeros(1000)}, half)
    half.write_bytes(half.read_bytes()[:500])
    check_files(tag_dir, allow_pickle=False, distributed=False)  # nothing refused
    damaged = tag_dir / "universal/zero/hf.roberta.embeddings.word_embeddings.weight/fp32.pt"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(half.read_bytes())
    with pytest.raises(CheckpointError) as info:
        check_files(tag_dir, allow_pickle=False, distributed=False)
    assert str(info.value).startswith(f"cannot read checkpoint {tag_dir}: universal/zero/hf.roberta.embeddings."
                                      "word_embeddings.weight/fp32.pt: ")
    assert str(info.value).endswith(f"({tag_dir / 'universal'} is the copy xpt-ds made of it to resume at another "
                                    "scale: delete it, and the next resume makes it again)")
    assert "\n" not in str(info.value)


def test_a_weights_file_cut_short_or_missing_is_refused_before_anything_loads(tmp_path):
    """``frozen_fp32.safetensors`` cut short: its header no longer covers the file, which the check reads (the
    header only) before DeepSpeed loads anything, naming the checkpoint and the file. Gone altogether: the tag
    is incomplete, by name (it failed only once the engine was built). Unit-level, on the fixture's tag."""
    from xpt_ds.checkpoint.tag_checks import check_files
    from xpt_ds.checkpoint.values import ValueFile

    tag_dir = _copy_old_checkpoint(tmp_path / "run")
    frozen = _frozen_as_today(tag_dir)
    check_files(tag_dir, allow_pickle=False, distributed=False)  # whole: nothing refused
    frozen.write_bytes(frozen.read_bytes()[:-4])
    with pytest.raises(CheckpointError) as info:
        check_files(tag_dir, allow_pickle=False, distributed=False)
    assert str(info.value) == (f"cannot read checkpoint {tag_dir}: frozen_fp32.safetensors: Error while "
                               "deserializing header: incomplete metadata, file not fully covered")
    with pytest.raises(CheckpointError) as info:  # read without the check (a phase's rewind, a kept phase end)
        ValueFile(frozen)
    assert str(info.value) == (f"cannot read {frozen}: Error while deserializing header: incomplete metadata, file "
                               "not fully covered (cut short, or not a safetensors file)")
    frozen.unlink()
    with pytest.raises(CheckpointError) as info:
        check_files(tag_dir, allow_pickle=False, distributed=False)
    assert str(info.value) == (f"checkpoint {tag_dir} is incomplete although it has its COMPLETE marker: "
                               "frozen_fp32.safetensors missing (1 file(s); copied without every rank's files?)")


def test_garbage_bytes_in_a_checkpoint_file_are_not_a_torch_file(tmp_path):
    """Garbage where a checkpoint's .pt file was: a ValueError that says so, which every reader turns into one line
    naming the file. Before, bytes such as b"junk" (the unpickler's GET opcode, then too few bytes) escaped as a
    struct.error traceback from export and resume, and others as an EOFError. 300 draws, as a fuzz found them."""
    import random

    from xpt_ds.io.trust import load_plain
    rng = random.Random(0)
    path = tmp_path / "x.pt"
    for i in range(300):
        n = rng.choice([1, 2, 4, 8, 30, 200])
        path.write_bytes(bytes(rng.randrange(256) for _ in range(n)) if i % 2 else (b"junk" * n)[:n])
        with pytest.raises(ValueError, match="^not a torch file"):
            load_plain(path, mmap=True)
