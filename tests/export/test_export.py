"""Export round trip: stock transformers on the exported directory == the trainer's own model."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import sentencepiece as spm
import torch
import yaml
from transformers import (AutoModel, AutoModelForMaskedLM, AutoModelForMultipleChoice, AutoModelForQuestionAnswering,
                          AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer)

from conftest import REPO, free_port, launch, run_main, write_config
from saved_modes import assert_umask_modes
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.cli.export import main as export_main

pytestmark = pytest.mark.multiproc


def _trainer_logits(run_root, ids, tmp_path):
    out = tmp_path / "logits.pt"
    torch.save(ids, str(out) + ".ids.pt")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           str(REPO / "tests/trainer_logits.py"), str(run_root / "cfg.yaml"), str(out)]  # torchrun: one launcher
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "DS_ACCELERATOR": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


@pytest.mark.parametrize("stage", [1, 3])
def test_export_matches_trainer(stage, straight_runs, tmp_path, corpus):
    """ZeRO-1 (DeepSpeed's stage-1-and-2 optimizer and checkpoint layout, as ZeRO-2) and ZeRO-3."""
    import shutil

    import yaml
    shared = straight_runs(stage)
    run_root = tmp_path / "straight"  # the shared run stays as it is: trainer_logits starts a Trainer on it
    shutil.copytree(shared / "run", run_root / "run")
    cfg = yaml.safe_load((shared / "cfg.yaml").read_text())
    (run_root / "cfg.yaml").write_text(yaml.safe_dump({**cfg, "run_dir": str(run_root / "run")}))
    out = tmp_path / "exported"
    assert export_main(["--run", str(run_root / "run"), "--out", str(out)]) == 0
    assert_umask_modes(out)  # the group can read the export

    model = AutoModelForMaskedLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    # transformers 5 writes 'TokenizersBackend', which 4's AutoTokenizer refused; this is its alias there
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    text = open(corpus / "spm.vocab", encoding="utf-8").read().split()[40] + " " + \
        open(corpus / "spm.vocab", encoding="utf-8").read().split()[60]
    enc = tok(text, return_tensors="pt")
    sp = spm.SentencePieceProcessor(model_file=str(corpus / "spm.model"))
    assert enc["input_ids"][0].tolist() == [sp.bos_id(), *sp.encode(text), sp.eos_id()]
    assert tok.mask_token == "<mask>" and tok.mask_token_id == sp.piece_to_id("<mask>")
    assert tok.pad_token_id == sp.pad_id() == model.config.pad_token_id
    # Pairs in RoBERTa's layout (one token type): <s> A </s></s> B </s>, all segment 0, and the model takes them.
    a, b = text.split()
    pair = tok(a, b, return_tensors="pt")
    assert model.config.type_vocab_size == 1
    assert pair["input_ids"][0].tolist() == [sp.bos_id(), *sp.encode(a), sp.eos_id(), sp.eos_id(), *sp.encode(b),
                                             sp.eos_id()]
    assert "token_type_ids" not in pair  # RoBERTa has one token type: the tokenizer returns none
    with torch.no_grad():
        model(**pair)

    ids = torch.randint(5, sp.get_piece_size(), (2, 20))
    ids[:, 0], ids[:, -1] = sp.bos_id(), sp.eos_id()
    with torch.no_grad():
        exported = model(input_ids=ids).logits
    assert torch.equal(exported, _trainer_logits(run_root, ids, tmp_path))



def test_a_bfloat16_export_holds_each_fp32_value_rounded_once(straight_runs, tmp_path):
    """``--dtype bfloat16``: the same tensors as the fp32 export of the same checkpoint, each rounded to bf16 as
    ``Tensor.to`` rounds, in half the bytes; its config says bfloat16, so ``from_pretrained`` loads it in bf16 (and
    in fp32 when asked, where its logits stay within bf16's rounding of the fp32 export's); the card and its
    reproduce line say so. A dtype the export does not write is refused by the command line."""
    from safetensors.torch import load_file
    run = straight_runs(1) / "run"
    full, half = tmp_path / "fp32", tmp_path / "bf16"
    for out, extra in ((full, []), (half, ["--dtype", "bfloat16"])):
        proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--out", str(out), *extra])
        assert proc.returncode == 0, proc.stderr[-2000:]
    want, got = load_file(full / "model.safetensors"), load_file(half / "model.safetensors")
    assert want.keys() == got.keys() and all(t.dtype == torch.float32 for t in want.values())
    assert all(got[k].dtype == torch.bfloat16 and torch.equal(got[k], want[k].to(torch.bfloat16)) for k in want)
    assert any(not torch.equal(got[k].float(), want[k]) for k in want)  # rounded, not fp32 values that fit bf16
    size = lambda d: (d / "model.safetensors").stat().st_size  # noqa: E731
    assert 0.45 < size(half) / size(full) < 0.55
    assert json.loads((half / "config.json").read_text())["dtype"] == "bfloat16"
    assert json.loads((full / "config.json").read_text())["dtype"] == "float32"
    assert AutoModelForMaskedLM.from_pretrained(half).dtype == torch.bfloat16
    from xpt_ds.evaluation.intrinsic import load_export
    assert load_export(half)[0].dtype == torch.float32  # xpt-ds evaluate --shards scores in float32
    ids = torch.randint(5, 100, (2, 16))
    with torch.no_grad():
        a = AutoModelForMaskedLM.from_pretrained(full).eval()(input_ids=ids).logits
        b = AutoModelForMaskedLM.from_pretrained(half, dtype=torch.float32).eval()(input_ids=ids).logits
    assert not torch.equal(a, b) and torch.allclose(a, b, rtol=0.05, atol=0.05)
    card = (half / "README.md").read_text()
    assert "its weights in bfloat16 (each rounded once from the training's fp32 value)" in card
    assert "--out NEW_EXPORT_DIR --dtype bfloat16" in card and "--dtype" not in (full / "README.md").read_text()
    proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--out", str(tmp_path / "f16"), "--dtype", "float16"])
    assert proc.returncode == 2 and "invalid choice: 'float16'" in proc.stderr and not (tmp_path / "f16").exists()


@pytest.mark.parametrize("stage,lost", [(1, "zero_pp_rank_1_mp_rank_00_optim_states.pt"),
                                        (3, "zero_pp_rank_1_mp_rank_00_model_states.pt")])
def test_a_complete_tag_missing_a_rank_file_is_one_line_and_leaves_no_out(stage, lost, straight_runs, tmp_path):
    """A tag with its marker but without one rank's file (a copy that left it behind) is refused by name before
    DeepSpeed reads anything, and a failed export (that, or a tag that does not exist) leaves no empty --out."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(straight_runs(stage) / "run", run)
    tag = sorted((run / "checkpoints").glob("global_step*"))[-1]
    (tag / lost).unlink()
    proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--tag", tag.name, "--out", str(tmp_path / "hf")])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("error:"), proc.stderr[-2000:]
    assert lost in lines[0] and tag.name in lines[0]
    assert not (tmp_path / "hf").exists()
    proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--tag", "global_step999999999", "--out",
                                      str(tmp_path / "hf2")])
    assert proc.returncode != 0 and "global_step999999999" in proc.stderr and not (tmp_path / "hf2").exists()


def test_a_marker_or_model_config_a_save_did_not_write_is_one_line(straight_runs, tmp_path):
    """The newest tag's COMPLETE emptied (a sync gone wrong): resume, export and evaluate each stop with one line
    naming the file, status.json says failed, and the tag is left as it was (its other files may be whole). A
    tag without hf_config/config.json, or with a broken one: export and evaluate name it."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(straight_runs(1) / "run", run)
    cfg = yaml.safe_load((straight_runs(1) / "cfg.yaml").read_text())
    tag = run / "checkpoints" / tag_for(8)
    (tag / "COMPLETE").write_text("")
    culprit = f"checkpoint {tag_for(8)}: {tag / 'COMPLETE'} is not the record a save writes"
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", {**cfg, "run_dir": str(run)}))])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {culprit}")
    assert json.loads((run / "status.json").read_text())["state"] == "failed" and tag.is_dir()
    for module, args in (("xpt_ds.cli.export", ["--out", str(tmp_path / "hf")]),
                         ("xpt_ds.cli.evaluate", ["--shards", *cfg["data"]["valid_shards"]])):
        proc = run_main(module, ["--run", str(run), *args])
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {culprit}"), proc.stderr
    (tag / "COMPLETE").write_text(json.dumps({"global_step": 8}))
    shutil.rmtree(tag / "hf_config")
    for module, args in (("xpt_ds.cli.export", ["--out", str(tmp_path / "hf")]),
                         ("xpt_ds.cli.evaluate", ["--shards", *cfg["data"]["valid_shards"]])):
        proc = run_main(module, ["--run", str(run), *args])
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
        assert lines[0] == (f"error: checkpoint {tag} has no hf_config/config.json, the target model's config the "
                            "export and evaluate build from (copy it from another checkpoint of the run: every one "
                            "holds the same)")
    shutil.copytree(run / "checkpoints" / tag_for(4) / "hf_config", tag / "hf_config")
    (tag / "hf_config/config.json").write_text("{}")
    proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--out", str(tmp_path / "hf")])
    assert proc.returncode == 2 and proc.stderr.strip().startswith(
        f"error: checkpoint {tag}: cannot read {tag / 'hf_config/config.json'}"), proc.stderr[-2000:]
    assert not (tmp_path / "hf").exists()


def test_export_replaces_an_earlier_export_whole_and_refuses_other_folders(straight_runs, tmp_path):
    """A second export into the same --out replaces the first's files whole (a file only the first wrote does not
    stay: evaluate would read a stale spm.model) and keeps the files it did not write (a model card); a non-empty
    folder that is not an export is refused in one line and
    left as it was; no staging folder is left beside --out."""
    run, out = straight_runs(1) / "run", tmp_path / "hf"
    proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--tag", tag_for(4), "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = json.loads((out / "xpt_export.json").read_text())["files"]
    assert set(written) == {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    (out / "spm.model").rename(out / "spm.model.old")  # stands for a file only the earlier export wrote
    record = json.loads((out / "xpt_export.json").read_text())
    (out / "xpt_export.json").write_text(json.dumps({"files": record["files"] + ["spm.model.old"]}))
    (out / "card").mkdir()
    (out / "card/README.md").write_text("the user's model card")  # not an export's: kept
    first = (out / "model.safetensors").read_bytes()
    proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--tag", tag_for(8), "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (out / "spm.model.old").exists() and (out / "model.safetensors").read_bytes() != first
    assert (out / "card/README.md").read_text() == "the user's model card"
    assert f"kept {out / 'card/README.md'}: not a file of the earlier export" in proc.stderr
    assert "card/README.md" not in json.loads((out / "xpt_export.json").read_text())["files"]
    (out / "xpt_export.json").unlink()  # an export from before the record: what an export writes goes, the rest stays
    (out / "vocab.txt").write_text("a keep_vocab export's copy of its source's tokenizer")
    proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--tag", tag_for(8), "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (out / "vocab.txt").exists() and (out / "card/README.md").read_text() == "the user's model card"
    assert f"kept {out / 'card/README.md'}: not a file of the earlier export" in proc.stderr
    assert AutoModelForMaskedLM.from_pretrained(out) is not None
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("mine")
    proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--out", str(other)])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(f"error: --out {other}: is not empty and holds no earlier xpt-ds export")
    assert [f.name for f in other.iterdir()] == ["todo.txt"] and (other / "todo.txt").read_text() == "mine"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["hf", "notes"]


def test_bert_layout_pairs_use_two_segments(tmp_path, corpus_bert):
    from xpt_ds.data.tokenizer import build_tokenizer, save_hf_tokenizer
    save_hf_tokenizer(build_tokenizer(str(corpus_bert / "spm.model")), tmp_path, model_max_length=64, token_types=2)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    sp = spm.SentencePieceProcessor(model_file=str(corpus_bert / "spm.model"))
    a, b = sp.id_to_piece(40), sp.id_to_piece(60)
    pair = tok(a, b)
    la, lb = len(sp.encode(a)), len(sp.encode(b))
    assert pair["input_ids"] == [sp.bos_id(), *sp.encode(a), sp.eos_id(), *sp.encode(b), sp.eos_id()]
    assert pair["token_type_ids"] == [0] * (la + 2) + [1] * (lb + 1)


def test_export_adapters_loads_with_remote_code(tmp_path, tiny_roberta, corpus):
    from conftest import base_config, write_config
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus, deepspeed=str(REPO / "ds_configs/zero1_fp32.json"))
    cfg["model"].update(method="adapters", adapter_size=8)
    cfg["phases"] = [{"name": "all", "steps": 2, "lr": 1e-3}]
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "exported"
    assert export_main(["--run", str(tmp_path / "run"), "--out", str(out)]) == 0
    model = AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True).eval()
    assert type(model).__name__ == "XptAdapterRobertaForMaskedLM"
    up = model.roberta.encoder.layer[0].output.adapter.up.weight
    assert up.abs().sum() > 0  # trained adapter weights came through
    ids = torch.randint(5, 100, (1, 10))
    plain = AutoModelForMaskedLM.from_pretrained(out).eval()  # stock class: adapters dropped
    assert not torch.allclose(model(input_ids=ids).logits, plain(input_ids=ids).logits)
    # Every task head fine-tuning uses loads with the same trained adapters and encoder.
    for auto in (AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification,
                 AutoModelForQuestionAnswering, AutoModelForMultipleChoice):
        task = auto.from_pretrained(out, trust_remote_code=True).eval()
        assert type(task).__name__.startswith("XptAdapterRoberta"), type(task)
        encoder = getattr(task, "roberta", task)
        assert torch.equal(encoder.encoder.layer[0].output.adapter.up.weight, up)
        with torch.no_grad():
            assert torch.equal(encoder(input_ids=ids).last_hidden_state,
                               model.roberta(input_ids=ids).last_hidden_state)


CHECKPOINTS = [("straight", 0), ("straight", 1), ("straight", 2), ("straight", 3), ("engine", "zero2_bf16")]


@pytest.mark.parametrize("kind,which", CHECKPOINTS, ids=[f"{k}-{w}" for k, w in CHECKPOINTS])
def test_a_checkpoint_read_one_value_at_a_time_is_deepspeeds_zero_to_fp32(kind, which, straight_runs, engine_runs):
    """``CheckpointValues`` (memory-mapped files, each value assembled when asked for) against DeepSpeed's own
    reconstruction (``zero_to_fp32``, which builds the whole state dict) of every parameter, bit for bit: ZeRO-0's
    module, ZeRO-1/2's flat groups with their paddings (bf16 runs' too), ZeRO-3's per-rank partitions; frozen ones
    from the checkpoint's frozen-weights file."""
    import contextlib
    import io

    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    from xpt_ds.io.trust import load_plain
    from xpt_ds.checkpoint.values import CheckpointValues, ValueFile, frozen_file
    run = straight_runs(which) / "run" if kind == "straight" else engine_runs(which)
    root = run / "checkpoints"
    phase1, phase2 = (tag_for(2), tag_for(6)) if kind == "straight" else (tag_for(4), tag_for(8))
    for tag in (phase1, phase2):  # phase 1 (the source frozen) and phase 2 (everything trains)
        values = CheckpointValues(root, tag)
        frozen = ValueFile(frozen_file(root / tag))
        if kind == "straight" and which == 0:
            want = {k: v.float() for k, v in load_plain(root / tag / "mp_rank_00_model_states.pt")["module"].items()}
        else:
            with contextlib.redirect_stdout(io.StringIO()):
                want = get_fp32_state_dict_from_zero_checkpoint(str(root), tag=tag, exclude_frozen_parameters=True)
        want.update({k: frozen.get(k) for k in frozen.keys})
        names = values.names()
        assert names and set(names) <= set(want), tag
        assert (tag == phase1) == bool(frozen.keys)
        assert [n for n in names if not torch.equal(values(n), want[n].float())] == [], tag
        assert values.loss_scale is None  # no fp16 run


def test_a_checkpoints_values_carry_an_fp16_runs_dynamic_loss_scale(tmp_path, straight_runs):
    """What a resume from a checkpoint's values alone (its optimizer never stepped) puts back besides them: the loss
    scale its skipped steps found. This machine's accelerator has no fp16, so the ZeRO-1 checkpoint's files say so
    here as an fp16 run's would: the saved config enables fp16, and the optimizer holds a dynamic scaler."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler

    from xpt_ds.checkpoint.values import CheckpointValues
    from xpt_ds.io.trust import load_plain
    tag = tmp_path / "checkpoints" / tag_for(2)
    shutil.copytree(straight_runs(1) / "run" / "checkpoints" / tag_for(2), tag)
    states, optim = tag / "mp_rank_00_model_states.pt", tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    model = load_plain(states)
    model["ds_config"]["fp16"] = {"enabled": True, "initial_scale_power": 16}
    torch.save(model, states)
    sd = load_plain(optim)
    scaler = DynamicLossScaler(2.0 ** 16, 1000, 1, 2, 2)
    scaler.cur_scale = 2.0 ** 13  # three overflows
    sd["optimizer_state_dict"].update(loss_scaler=scaler, dynamic_loss_scale=True)
    torch.save(sd, optim)
    assert CheckpointValues(tmp_path / "checkpoints", tag_for(2)).loss_scale == 2.0 ** 13


def _same_as_save_pretrained(model, tmp_path, max_shard_bytes):
    """``save_model`` (streamed, files of at most ``max_shard_bytes``) against the stock ``save_pretrained`` of the
    same model: the same tensors under the same names, the same config.json and generation config; and stock
    ``from_pretrained`` loads the sharded directory to the same logits."""
    from safetensors.torch import load_file

    from xpt_ds.export.hf import save_model
    streamed, stock = tmp_path / "streamed", tmp_path / "stock"
    streamed.mkdir()
    save_model(model, streamed, max_shard_bytes=max_shard_bytes)
    model.save_pretrained(stock)
    shards = sorted(streamed.glob("model-*-of-*.safetensors"))
    assert len(shards) > 1 and (streamed / "model.safetensors.index.json").is_file()
    index = json.loads((streamed / "model.safetensors.index.json").read_text())
    got = {}
    for shard in shards:
        assert shard.stat().st_size <= max_shard_bytes + 100_000  # a tensor larger than the cap gets its own file
        got.update(load_file(shard))
    want = {}
    for f in stock.glob("*.safetensors"):
        want.update(load_file(f))
    assert got.keys() == want.keys() == set(index["weight_map"])
    assert [k for k in want if not torch.equal(got[k], want[k])] == []
    drop = ("transformers_version", "auto_map")  # auto_map: an adapters export names its shipped classes
    read = lambda d, f: {k: v for k, v in json.loads((d / f).read_text()).items() if k not in drop}  # noqa: E731
    assert read(streamed, "config.json") == read(stock, "config.json")
    assert (streamed / "generation_config.json").is_file() == (stock / "generation_config.json").is_file()
    if (stock / "generation_config.json").is_file():
        assert read(streamed, "generation_config.json") == read(stock, "generation_config.json")
    return streamed


EXPORTS = [("roberta", "xpt"), ("bert", "adapters"), ("llama-untied", "xpt"), ("gpt2-tied", "xpt"),
           ("qwen2-tied", "xpt")]


@pytest.mark.parametrize("source,method", EXPORTS, ids=[f"{s}-{m}" for s, m in EXPORTS])
def test_a_streamed_sharded_export_is_what_save_pretrained_writes(source, method, tiny_roberta, tiny_bert,
                                                                  tiny_decoder, corpus, corpus_bert, tmp_path):
    from transformers import AutoModelForCausalLM

    from xpt_ds.config import ModelConfig
    from xpt_ds.data.tokenizer import build_tokenizer
    from xpt_ds.model.build import build_model
    family, _, tied = source.partition("-")
    path = {"roberta": tiny_roberta, "bert": tiny_bert}.get(family) or tiny_decoder(family, tied == "tied")
    corp = corpus_bert if family == "bert" else corpus
    cfg = ModelConfig(source=str(path), tokenizer=str(corp / "spm.model"), method=method,
                      **({"adapter_size": 8} if method == "adapters" else {}))
    model = build_model(cfg, build_tokenizer(cfg.tokenizer)).model.eval()
    out = _same_as_save_pretrained(model, tmp_path, max_shard_bytes=40_000)
    if method == "adapters":  # its classes load with trust_remote_code (test_export_adapters_loads_with_remote_code)
        from xpt_ds.model.methods.adapters import auto_map
        assert json.loads((out / "config.json").read_text())["auto_map"] == auto_map(family)
        assert (out / "xpt_adapters.py").is_file()
        return
    auto = AutoModelForCausalLM if family not in ("roberta", "bert") else AutoModelForMaskedLM
    loaded = auto.from_pretrained(out).eval()
    ids = torch.randint(5, model.config.vocab_size, (2, 12))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_lora_export_merges_each_update_as_peft_does(tiny_decoder, corpus, tmp_path):
    """The streamed merge (peft's get_delta_weight, one layer at a time) against peft's own ``merge`` of the whole
    model, bit for bit, with non-zero updates (a fresh LoRA's B is zero: nothing would be tested)."""
    from safetensors.torch import load_file

    from xpt_ds.config import ModelConfig
    from xpt_ds.data.tokenizer import build_tokenizer
    from xpt_ds.model.methods import lora
    from xpt_ds.model.build import build_model
    from xpt_ds.export.hf import save_model
    for family in ("llama", "gpt2"):  # GPT-2's Conv1D: fan_in_fan_out
        cfg = ModelConfig(source=str(tiny_decoder(family, False)), tokenizer=str(corpus / "spm.model"), method="lora")
        model = build_model(cfg, build_tokenizer(cfg.tokenizer)).model
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".lora_B." in name:
                    p.normal_(generator=torch.Generator().manual_seed(len(name)))
        out = tmp_path / family
        out.mkdir()
        save_model(model, out)
        got = load_file(out / "model.safetensors")
        want = lora.merged(model).state_dict()
        assert not any(".lora_" in k or ".base_layer." in k for k in got)
        assert [k for k in got if not torch.equal(got[k], want[k])] == [], family


def _exported_files(out) -> set[str]:
    return {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}


def test_export_fills_the_working_directory_in_place(straight_runs, tmp_path, monkeypatch, capfd):
    """``--out .`` wrote everything, then failed renaming '.' (Device or resource busy). Now the working
    directory is filled where it is (renamed away, the shell that ran the export would sit in the removed copy), a
    second export replaces the first's files and keeps the user's, and an export stopped while moving its files in
    leaves no config.json (no folder that loads as a complete model) and the next one replaces it whole."""
    from xpt_ds.export import out_dir
    run, here = straight_runs(1) / "run", tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    inode = here.stat().st_ino
    assert export_main(["--run", str(run), "--tag", tag_for(4), "--out", "."]) == 0
    assert here.stat().st_ino == inode and (here / "README.md").read_text().count("\n# here\n") == 1
    assert set(json.loads((here / "xpt_export.json").read_text())["files"]) == _exported_files(here)
    first = (here / "model.safetensors").read_bytes()
    (here / "notes.txt").write_text("mine")
    real_replace, moved = os.replace, []

    def stopped(src, dst):  # the third file moved in from the staging folder: the export stops there
        if ".xpt-export.writing-" in str(src) and ".xpt-export.writing-" not in str(dst):
            moved.append(dst)
            if len(moved) == 3:
                raise OSError(28, "No space left on device")
        real_replace(src, dst)
    monkeypatch.setattr(out_dir.os, "replace", stopped)
    assert export_main(["--run", str(run), "--tag", tag_for(8), "--out", "."]) == 2
    assert "No space left on device" in capfd.readouterr().err
    assert not (here / "config.json").exists() and (here / "notes.txt").read_text() == "mine"
    monkeypatch.setattr(out_dir.os, "replace", real_replace)
    assert export_main(["--run", str(run), "--tag", tag_for(8), "--out", "."]) == 0
    assert here.stat().st_ino == inode and (here / "model.safetensors").read_bytes() != first
    record = json.loads((here / "xpt_export.json").read_text())["files"]
    assert set(record) == _exported_files(here) - {"notes.txt"} and (here / "notes.txt").read_text() == "mine"
    assert AutoModelForMaskedLM.from_pretrained(here) is not None
    assert [p.name for p in tmp_path.iterdir()] == ["here"]  # no staging folder left


def test_export_into_a_symlink_fills_its_directory(straight_runs, tmp_path):
    """``--out`` a symbolic link to a directory: the link was replaced by the export's folder."""
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    for tag in (tag_for(4), tag_for(8)):
        assert export_main(["--run", str(straight_runs(1) / "run"), "--tag", tag, "--out", str(link)]) == 0
        assert link.is_symlink() and link.resolve() == real and (real / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]  # no staging folder left


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mount --bind needs root")
def test_export_fills_a_mount_point_in_place(straight_runs, tmp_path):
    """A mount point (a container's volume; here a bind mount, which os.path.ismount does not see) cannot be
    renamed: the export wrote everything, then failed with 'Device or resource busy'."""
    run, src, mnt = straight_runs(1) / "run", tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    if subprocess.run(["mount", "--bind", str(src), str(mnt)], capture_output=True).returncode:
        pytest.skip("mount --bind is not allowed here")
    try:
        for tag in (tag_for(4), tag_for(8)):
            assert export_main(["--run", str(run), "--tag", tag, "--out", str(mnt)]) == 0
            assert set(json.loads((src / "xpt_export.json").read_text())["files"]) == _exported_files(src)
        assert AutoModelForMaskedLM.from_pretrained(mnt) is not None
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_an_hf_config_that_does_not_describe_the_checkpoint_is_one_line(straight_runs, tmp_path, capfd):
    """A tag's hf_config/config.json of another model (copied from another run, as the missing-config error says
    to copy one): a layer more, a layer less (which exported a smaller model without a word), another width."""
    run = tmp_path / "run"
    shutil.copytree(straight_runs(1) / "run", run)
    tag = run / "checkpoints" / tag_for(8)
    config = tag / "hf_config/config.json"
    saved = json.loads(config.read_text())
    layers = saved["num_hidden_layers"]
    for edit, why in (({"num_hidden_layers": layers + 1}, "the checkpoint lacks 16 parameter(s) of the config's "
                       f"model (first: roberta.encoder.layer.{layers}.attention.output.LayerNorm.bias)"),
                      ({"num_hidden_layers": layers - 1}, "the checkpoint holds 16 parameter(s) the config's model "
                       f"lacks (first: roberta.encoder.layer.{layers - 1}.attention.output.LayerNorm.bias)"),
                      ({"intermediate_size": 96}, "roberta.encoder.layer.0.intermediate.dense.weight is (128, 64) in "
                       "the checkpoint, (96, 64) in the config's model")):
        config.write_text(json.dumps({**saved, **edit}))
        assert export_main(["--run", str(run), "--out", str(tmp_path / "hf")]) == 2
        assert capfd.readouterr().err.splitlines() == [
            f"error: checkpoint {tag}: its hf_config/config.json does not describe this checkpoint's weights: {why}"]
        assert not (tmp_path / "hf").exists()
