"""xpt-ds train with decoder sources: GPT-2 (tied head) on one rank under bf16 ZeRO-2, phase 1 bitwise frozen with
no optimizer state and an export that stock transformers loads and generates with; Llama (untied head) on two
ranks under ZeRO-3 through torchrun, resumed exactly across the phase boundary, its export's logits equal to the
trainer's engine's."""
import json
import math
import shutil
import subprocess

import pytest
import sentencepiece as spm
import torch
from conftest import REPO, _command, base_config, launch, read_metrics, write_config
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2LMHeadModel, LlamaForCausalLM

from xpt_ds.evaluate import main as evaluate_main
from xpt_ds.export import main as export_main
from xpt_ds.model.causal_lm import CausalLMObjective
from xpt_ds.model.objective import strip_prefix
from xpt_ds.training.checkpoint import complete_tags, tag_for
from xpt_ds.training.export import load_checkpoint_fp32, load_model

pytestmark = pytest.mark.multiproc


def _engine_logits(cfg_path, ids, tmp_path):
    """The trainer's engine's fp32 logits on ``ids`` after loading the run's newest checkpoint (2 ranks, torchrun:
    tests/trainer_logits.py)."""
    out = tmp_path / "logits.pt"
    torch.save(ids, str(out) + ".ids.pt")
    cmd, env = _command([], 2, None)
    cmd = cmd[:cmd.index("-m", 3)] + [str(REPO / "tests/trainer_logits.py"), str(cfg_path), str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


def _config(tmp_path, name, source, corpus, ds, every=1):
    cfg = base_config(tmp_path / name, source, corpus, deepspeed=str(REPO / f"ds_configs/{ds}.json"),
                      checkpoint={"every_steps": every})
    cfg["phases"] = [{**p, "steps": 2} for p in cfg["phases"]]
    if "bf16" in ds:
        cfg["optim"]["torch_adam"] = False
    return cfg


def test_gpt2_phase1_frozen_then_export_generates(tmp_path, tiny_decoder, corpus):
    source = tiny_decoder("gpt2", True)
    cfg = _config(tmp_path, "run", source, corpus, "zero2_bf16", every=2)
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "phase 'phase1' trains" in proc.stderr and "on next_token" in proc.stderr

    # Phase 1 (xpt preset: @new): the reused layers, positions and final norm are the source's, bit for bit.
    tag_dir = tmp_path / "run/checkpoints" / tag_for(2)
    states = torch.load(tag_dir / "mp_rank_00_model_states.pt", map_location="cpu", weights_only=False)
    module = strip_prefix(states["module"])
    src = GPT2LMHeadModel.from_pretrained(source).state_dict()
    reused = {k.replace(f"h.{i}.", f"h.{i + 1}.", 1): k for k in src for i in range(2)
              if k.startswith(f"transformer.h.{i}.")}
    reused |= {k: k for k in src if k.startswith(("transformer.wpe", "transformer.ln_f"))}
    frozen = strip_prefix(torch.load(tag_dir / "frozen_fp32.pt", weights_only=True))
    assert set(frozen) == set(reused)
    for tgt, s in reused.items():
        assert module[tgt].dtype == torch.bfloat16 and torch.equal(module[tgt], src[s].bfloat16()), tgt
        assert torch.equal(frozen[tgt], src[s]), tgt  # exact fp32 under bf16
    osd = torch.load(tag_dir / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", weights_only=False)[
        "optimizer_state_dict"]
    held = sum(t.numel() for t in osd["single_partition_of_fp32_groups"])
    trainable = sum(shape.numel() for group in states["param_shapes"] for shape in group.values())
    tied = {"lm_head.weight"}  # the state dict's second name of the input embeddings
    assert held == trainable == sum(v.numel() for k, v in module.items() if k not in set(frozen) | tied)

    # Export: a stock GPT2LMHeadModel with 4 layers and the SentencePiece vocabulary; its logits are the
    # checkpoint's fp32 weights through the training objective (position ids, as trained).
    out = tmp_path / "exported"
    assert export_main(["--run", str(tmp_path / "run"), "--out", str(out)]) == 0
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    assert type(model) is GPT2LMHeadModel and model.config.num_hidden_layers == 4 and model.config.vocab_size == 200
    sp = spm.SentencePieceProcessor(model_file=str(corpus / "spm.model"))
    text = " ".join(sp.id_to_piece(i).lstrip("▁") for i in (40, 60, 80))
    enc = tok(text, return_tensors="pt")
    assert enc["input_ids"][0].tolist() == [sp.bos_id(), *sp.encode(text)]  # <s> text, no </s>: generate goes on
    trained, _ = load_model(tmp_path / "run")
    objective = CausalLMObjective(trained.eval())
    ids = enc["input_ids"]
    with torch.no_grad():
        exported = model(**enc).logits
        positions = torch.arange(ids.numel())
        ours = objective(input_ids=ids, position_ids=positions[None], mlm_positions=positions,
                         mlm_targets=positions, return_logits=True)
    assert torch.equal(exported[0], ours)
    generated = model.generate(**enc, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
    assert generated.shape == (1, ids.shape[1] + 6) and torch.equal(generated[0, :ids.shape[1]], ids[0])
    assert isinstance(tok.decode(generated[0, ids.shape[1]:], skip_special_tokens=True), str)

    # Evaluate: every test piece (and each document's end) predicted once; the export scores as its checkpoint;
    # bits per byte beside the unigram baseline's, on the same tokens.
    shards = f"{corpus}/manifest.json:test"
    scores = {}
    for name, args in (("export", ["--model", str(out)]), ("run", ["--run", str(tmp_path / "run")]),
                       ("unigram", ["--model", str(out), "--unigram", f"{corpus}/manifest.json:train"])):
        assert evaluate_main([*args, "--shards", shards, "--seq-len", "32", "--out", str(tmp_path / f"{name}.json")]) == 0
        scores[name] = json.loads((tmp_path / f"{name}.json").read_text())
    exp, run, uni = scores["export"], scores["run"], scores["unigram"]
    assert exp["objective"] == "next_token" and exp["tokens"] == run["tokens"] == uni["tokens"] == 181 + 2
    assert exp["loss"] == pytest.approx(run["loss"], rel=1e-6)
    for r in (exp, uni):
        assert r["bits_per_byte"] == pytest.approx(r["loss"] * r["tokens"] / math.log(2) / r["bytes"])
        assert 0 < r["bits_per_byte"] < r["bits_per_char"] * 1.0001 and math.isfinite(r["ppl"])


def test_llama_zero3_two_ranks_resume_across_the_boundary_and_export(tmp_path, tiny_decoder, corpus):
    source = tiny_decoder("llama", False, 0.0)
    cfg = _config(tmp_path, "straight", source, corpus, "zero3_fp32")
    proc = launch(["--config", str(write_config(tmp_path / "straight.yaml", cfg))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # ZeRO-3 phase 1: the reused layers and the final norm are frozen at the source's values.
    src = LlamaForCausalLM.from_pretrained(source).state_dict()
    frozen = strip_prefix(torch.load(tmp_path / f"straight/checkpoints/{tag_for(2)}/frozen_fp32.pt",
                                     weights_only=True))
    reused = {k.replace(f"layers.{i}.", f"layers.{i + 1}.", 1): k for k in src for i in range(2)
              if k.startswith(f"model.layers.{i}.")} | {"model.norm.weight": "model.norm.weight"}
    assert set(frozen) == set(reused) and all(torch.equal(frozen[t], src[s]) for t, s in reused.items())

    run = tmp_path / "resumed"
    shutil.copytree(tmp_path / "straight/checkpoints" / tag_for(2), run / "checkpoints" / tag_for(2))
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", {**cfg, "run_dir": str(run)}))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(2)}" in proc.stderr
    want, got = read_metrics(tmp_path / "straight"), read_metrics(run)
    assert sorted(got) == [3, 4] and all(got[s]["train/loss"] == want[s]["train/loss"] for s in got)
    assert complete_tags(run / "checkpoints")[-1] == tag_for(4)
    a = load_checkpoint_fp32(tmp_path / "straight/checkpoints", tag_for(4))
    b = load_checkpoint_fp32(run / "checkpoints", tag_for(4))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["lm_head.weight"], a["model.embed_tokens.weight"])  # untied: its own rows

    out = tmp_path / "exported"
    assert export_main(["--run", str(run), "--out", str(out)]) == 0
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(model) is LlamaForCausalLM and model.config.num_hidden_layers == 4
    ids = torch.randint(5, 200, (2, 20))
    ids[:, 0] = 0
    with torch.no_grad():
        exported = model(input_ids=ids).logits
    assert torch.equal(exported, _engine_logits(tmp_path / "cfg.yaml", ids, tmp_path))
