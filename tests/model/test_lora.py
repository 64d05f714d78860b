"""method: lora (xpt_ds.model.methods.lora): LoRA through peft on a decoder source's reused layers beside the new
vocabulary's rows. In process: the build (source weights bit for bit under ``base_layer``, the updates new and
zero at the start, nothing else new), the one-line errors. A run under ZeRO-3 (one rank; the partitioned
parameters and their hooks as on many): the source weights still the source's after training, a resume mid-run
identical to the straight run, and an export that stock transformers loads without peft, its logits the
checkpoint's."""
from __future__ import annotations

import shutil
import sys

import pytest
import torch
from conftest import base_config, config_only, launch, read_metrics, write_config
from transformers import (
    AutoModelForCausalLM,
    Gemma2ForCausalLM,
    GPT2LMHeadModel,
    LlamaForCausalLM,
    Phi3ForCausalLM,
    Qwen3ForCausalLM,
)

from xpt_ds.config import (
    ConfigError,
    DataConfig,
    LoraConfig,
    ModelConfig,
    TrainConfig,
    validate,
)
from xpt_ds.export.hf import load_checkpoint_fp32, load_model
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.config.manager import from_dict
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.cli.export import main as export_main
from xpt_ds.model.build import build_model
from xpt_ds.model.methods.lora import base_name
from xpt_ds.model.phases import build_phase_trainables
from xpt_ds.model.skeleton import skeleton

STOCK = {"gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM, "qwen3": Qwen3ForCausalLM, "gemma2": Gemma2ForCausalLM,
         "phi3": Phi3ForCausalLM}


def _build(source, corpus, **model):
    tok = build_tokenizer(str(corpus / "spm.model"))
    cfg = ModelConfig(source=str(source), tokenizer=str(corpus / "spm.model"), method="lora", **model)
    return build_model(cfg, tok, DataConfig(train_shards=[f"{corpus}/manifest.json:train"])), tok


@pytest.mark.parametrize("family,tied", [("gpt2", True), ("llama", False), ("qwen3", False), ("gemma2", True),
                                         ("phi3", False)])
def test_build_keeps_the_source_under_the_updates(family, tied, tiny_decoder, corpus):
    source = tiny_decoder(family, tied)
    built, tok = _build(source, corpus, lora=LoraConfig(rank=4, alpha=8.0))
    model, src = built.model, STOCK[family].from_pretrained(source)
    assert type(model) is type(src) and model.config.num_hidden_layers == 2  # no ITLs
    assert model.config.vocab_size == tok.vocab_size
    src_state = src.state_dict()
    lora = {n for n, t in built.tags.items() if "@lora" in t}
    # every linear map: c_attn, c_proj (attention's and MLP's), c_fc; Phi-3's qkv_proj, o_proj, gate_up_proj, down_proj
    per_layer = 4 if family in ("gpt2", "phi3") else 7
    assert len(lora) == 2 * 2 * per_layer  # A and B, per target, per layer
    for name, p in model.named_parameters():
        tags = built.tags[name]
        if name in lora:
            assert "@new" in tags and ("lora_A" in name or "lora_B" in name)
            assert p.shape[0 if "lora_A" in name else 1] == 4  # rank
            if "lora_B" in name:
                assert not p.any()  # B = 0: the fresh model computes what its base weights do
        elif "@source" in tags:
            assert torch.equal(p, src_state[base_name(name)]), name
        else:  # new and not LoRA: the new vocabulary's rows only
            assert tags & {"@embeddings", "@output_embeddings"}, name
    new = {n for n, t in built.tags.items() if "@new" in t}
    rows = {"transformer.wte.weight"} if family == "gpt2" else {"model.embed_tokens.weight"} | (
        set() if tied else {"lm_head.weight"})
    assert new == lora | rows
    # The preset (one phase, @new) trains exactly the updates and the rows.
    cfg = _train_config(source, corpus)
    assert build_phase_trainables(cfg, built.tags) == [new]
    # The skeleton a resume or the export rebuilds from the HF config has the same parameters, in the same order.
    twin = skeleton(model.config)
    assert [n for n, _ in twin.named_parameters()] == [n for n, _ in model.named_parameters()]
    # B = 0: logits equal those of the stock model with the same rows and source layers.
    plain = STOCK[family](model.config).eval()
    plain.load_state_dict({base_name(k): v for k, v in model.state_dict().items() if ".lora_" not in k})
    ids = torch.randint(5, tok.vocab_size, (2, 12))
    with torch.no_grad():
        assert torch.equal(plain(ids).logits, model.eval()(ids).logits)


def _train_config(source, corpus):
    cfg = base_config(corpus / "unused_run", source, corpus)
    cfg["model"]["method"] = "lora"
    cfg["phases"] = [{"name": "lora", "steps": 2, "lr": 1e-3}]
    out = from_dict(TrainConfig, cfg)
    validate(out)
    return out


def test_one_line_errors(tiny_decoder, tiny_roberta, corpus, monkeypatch):
    with pytest.raises(ConfigError, match=r"'model.method': lora is for decoder sources .* roberta masked LM"):
        _build(tiny_roberta, corpus)
    with pytest.raises(ConfigError, match=r"'model.lora.targets': wq is not a linear map of a llama layer"):
        _build(tiny_decoder("llama", False), corpus, lora=LoraConfig(targets=["q_proj", "wq"]))
    cfg = _train_config(tiny_decoder("llama", False), corpus)
    for key, value, message in (("rank", 0, "must be >= 1"), ("alpha", 0.0, "must be > 0"),
                                ("dropout", 1.0, r"must be in \[0, 1\)")):
        setattr(cfg.model.lora, key, value)
        with pytest.raises(ConfigError, match=f"'model.lora.{key}' {message}"):
            validate(cfg)
        setattr(cfg.model.lora, key, type(value)(getattr(ModelConfig().lora, key)))
    monkeypatch.setitem(sys.modules, "peft", None)  # not installed: import peft raises ImportError
    with pytest.raises(ConfigError, match=r"'model.method': lora needs the peft package \(pip install 'xpt-ds\[lora"):
        _build(tiny_decoder("llama", False), corpus)


def test_zero3_resume_mid_run_and_merged_export(tmp_path, tiny_decoder, corpus):
    source = tiny_decoder("llama", False, 0.0)
    cfg = base_config(tmp_path / "straight", source, corpus, deepspeed="ds_configs/zero3_fp32.json",
                      checkpoint={"every_steps": 2})
    cfg["model"] |= {"method": "lora", "lora": {"rank": 4, "alpha": 8.0, "dropout": 0.1}}
    cfg["phases"] = [{"name": "lora", "steps": 4, "lr": 1e-2, "warmup_steps": 1}]
    proc = launch(["--config", str(write_config(tmp_path / "straight.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "phase 'lora' trains" in proc.stderr

    run = tmp_path / "resumed"
    shutil.copytree(tmp_path / "straight/checkpoints" / tag_for(2), run / "checkpoints" / tag_for(2))
    # the resume reads the source's config.json, not its weights (a resume makes no build plan: xpt_ds.training.build)
    weightless = {**cfg["model"], "source": str(config_only(source, tmp_path / "config_only"))}
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", {**cfg, "run_dir": str(run),
                                                                        "model": weightless}))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    want, got = read_metrics(tmp_path / "straight"), read_metrics(run)
    assert sorted(got) == [3, 4] and all(got[s]["train/loss"] == want[s]["train/loss"] for s in got)
    a = load_checkpoint_fp32(tmp_path / "straight/checkpoints", tag_for(4))
    b = load_checkpoint_fp32(run / "checkpoints", tag_for(4))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    # The source weights never trained; the updates did.
    src = LlamaForCausalLM.from_pretrained(source).state_dict()
    for name, value in a.items():
        if name.startswith(("model.layers.", "model.norm.")) and ".lora_" not in name:  # base_layer, norms
            assert torch.equal(value, src[base_name(name)]), name
    assert any(a[k].abs().sum() > 0 for k in a if ".lora_B." in k)

    # Export: the updates merged, a stock LlamaForCausalLM without peft's modules or config key, its logits the
    # checkpoint's model's (merged weights sum in another order: not bitwise).
    out = tmp_path / "exported"
    assert export_main(["--run", str(run), "--out", str(out)]) == 0
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(model) is LlamaForCausalLM and model.config.num_hidden_layers == 2
    assert type(model.model.layers[0].self_attn.q_proj) is torch.nn.Linear
    assert not hasattr(model.config, "xpt_lora") and model.config.xpt_method == "lora"
    trained, _ = load_model(run)
    ids = torch.randint(5, 200, (2, 20))
    with torch.no_grad():
        exported, ours = model(input_ids=ids).logits, trained.eval()(input_ids=ids).logits
    assert torch.allclose(exported, ours, atol=1e-5, rtol=0)
    assert not torch.equal(model.model.layers[0].self_attn.q_proj.weight, src["model.layers.0.self_attn.q_proj.weight"])


def test_a_qwen2_lora_run_exports_in_llamas_form_with_its_updates_merged(tmp_path, tiny_decoder, corpus):
    """LoRA on a Qwen2 source of full attention with the run's own vocabulary: the export is the Llama model of
    the same function (xpt_ds.export.llama_layout), every base weight merged with its update; its only new
    values are o_proj's zero biases (LoRA's names of the base weights are not new ones)."""
    source = tiny_decoder("qwen2_full", True, 0.0)
    cfg = base_config(tmp_path / "run", source, corpus)
    cfg["model"] |= {"method": "lora", "lora": {"rank": 4, "alpha": 8.0}}
    cfg["phases"] = [{"name": "lora", "steps": 2, "lr": 1e-2}]
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "exported"
    assert export_main(["--run", str(tmp_path / "run"), "--out", str(out)]) == 0
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(model) is LlamaForCausalLM and model.config.attention_bias
    assert not model.model.layers[0].self_attn.o_proj.bias.any() and model.model.layers[0].self_attn.q_proj.bias.any()
    trained, _ = load_model(tmp_path / "run")
    ids = torch.randint(5, 200, (2, 20))
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, trained.eval()(input_ids=ids).logits, atol=1e-5, rtol=0)
