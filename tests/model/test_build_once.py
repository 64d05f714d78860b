"""One build path, each value filled once (xpt_ds.model.build.build_plan, xpt_ds.model.values.stock_init,
xpt_ds.model.values.source_files): only new parameters are drawn, every reused one is the source's tensor bit for bit,
a new parameter's value depends on its name and the seed alone and has the stock class's distribution, and a
source in the hub's layout (sharded safetensors, bf16 or fp32; pytorch_model.bin; legacy names) reads as stock
transformers reads it."""
from __future__ import annotations

import dataclasses
import logging
import re

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, BertModel

from conftest import OTHER_LLAMA_LAYOUT
from xpt_ds.config import DataConfig, ModelConfig
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.model.build import build_model, build_plan, open_source, source_config, source_skeleton
from xpt_ds.model.decoder import is_decoder
from xpt_ds.model.values.stock_init import StockInit, param_seed
from xpt_ds.model.skeleton import assign, skeleton
from xpt_ds.model.values.source_files import RandomSource

ENCODER_METHODS = ["xpt", "xpt_sp", "xpt_no_itl", "scratch", "random_source", "adapters", "trelm", "trelm_no_tri"]
DECODER_METHODS = ["xpt", "xpt_sp", "xpt_no_itl", "scratch", "random_source", "lora"]
FAMILIES = ["roberta", "bert", "bert-headless", "gpt2-tied", "gpt2-untied", "llama-tied", "llama-untied",
            "mistral-untied", "qwen2-tied", *(f"{f}-untied" for f in OTHER_LLAMA_LAYOUT)]
KINDS = ([(f, "xpt") for f in FAMILIES] + [("roberta", m) for m in ENCODER_METHODS[1:]]
         + [("llama-untied", m) for m in DECODER_METHODS[1:]] + [("gpt2-tied", "lora"), ("phi3-untied", "lora"),
                                                                 ("bert-headless", "trelm")])


@pytest.fixture(scope="module")
def headless_bert(tmp_path_factory, tiny_bert):
    """An encoder-only checkpoint (BertModel: no MLM head, its keys without ``bert.``), as all-MiniLM-L6-v2's."""
    out = tmp_path_factory.mktemp("headless")
    BertModel.from_pretrained(tiny_bert).save_pretrained(out)
    return out


def _source(kind, tiny_roberta, tiny_bert, headless_bert, tiny_decoder, corpus, corpus_bert):
    family, _, tied = kind.partition("-")
    if family in ("roberta", "bert"):
        path = {"roberta": tiny_roberta, "bert": headless_bert if tied == "headless" else tiny_bert}[family]
        return path, (corpus if family == "roberta" else corpus_bert)
    return tiny_decoder(family, tied == "tied"), corpus


def _config(path, corpus, method):
    return ModelConfig(source=str(path), tokenizer=str(corpus / "spm.model"), method=method, init_seed=11,
                       **({"adapter_size": 8} if method == "adapters" else {}))


@pytest.mark.parametrize("kind,method", KINDS, ids=[f"{k}-{m}" for k, m in KINDS])
def test_only_new_parameters_are_drawn_and_every_reused_one_is_the_sources(kind, method, monkeypatch, tiny_roberta,
                                                                         tiny_bert, headless_bert, tiny_decoder,
                                                                         corpus, corpus_bert):
    """Every parameter gets its value once; the initialisers run for exactly the parameters whose recipe draws them
    (all tagged @new), never for one that comes from the source; each @source parameter equals stock
    ``from_pretrained``'s tensor (under its source name: one layer down past ITL_in, LoRA's base_layer) bit for bit;
    a random source's are its own draws."""
    path, corp = _source(kind, tiny_roberta, tiny_bert, headless_bert, tiny_decoder, corpus, corpus_bert)
    cfg = _config(path, corp, method)
    tok = build_tokenizer(cfg.tokenizer)
    drawn = []
    real_value = StockInit.value

    def recording(self, name):
        drawn.append((self.init_seed, name))
        return real_value(self, name)
    monkeypatch.setattr(StockInit, "value", recording)
    plan = build_plan(cfg, tok, DataConfig(train_shards=[f"{corp}/manifest.json:train"]))
    asked = []
    values = plan.values

    def once(name):
        asked.append(name)
        return values(name)
    model = assign(skeleton(plan.tcfg), once)
    plan.close()
    names = [n for n, _ in model.named_parameters()]
    assert sorted(asked) == sorted(names)  # each parameter filled once
    recipes = plan.recipes
    target_draws = [n for seed, n in drawn if seed == cfg.init_seed]
    assert sorted(target_draws) == sorted(n for n, r in recipes.items() if r.kind == "init" or r.shift)
    source_tagged = {n for n, t in plan.tags.items() if "@source" in t}
    assert not source_tagged & set(target_draws)
    assert all("@new" in plan.tags[n] for n in target_draws)
    if method == "scratch":
        assert not source_tagged and all(r.kind != "source" for r in recipes.values())
        return
    assert source_tagged, "nothing reused: nothing tested"
    src_cfg = source_config(cfg)
    if method == "random_source":
        src = RandomSource(source_skeleton(src_cfg), cfg.init_seed + 1)
        want = {r.key: src.get(r.key) for n, r in recipes.items() if n in source_tagged}
    else:
        auto = AutoModelForCausalLM if is_decoder(src_cfg) else AutoModelForMaskedLM
        want = dict(auto.from_pretrained(path, dtype=torch.float32).named_parameters())
    params = dict(model.named_parameters())
    differ = [n for n in source_tagged if recipes[n].shift == 0 and not torch.equal(params[n], want[recipes[n].key])]
    assert differ == []
    # of the source only what it lacks was drawn (the headless BERT's MLM head: from init_seed + 1, as stock
    # from_pretrained draws a missing weight; its copies count as @new), and all of a random source
    source_draws = {n for seed, n in drawn if seed == cfg.init_seed + 1}
    used = {r.key for r in recipes.values() if r.kind == "source"}
    if method == "random_source":  # and the rows model.embedding_init works from (an untied head's too)
        assert used <= source_draws and source_draws - used == {
            n for n in ("roberta.embeddings.word_embeddings.weight", "model.embed_tokens.weight", "lm_head.weight")
            if n in source_skeleton(src_cfg).state_dict()}
    else:
        auto = AutoModelForCausalLM if is_decoder(src_cfg) else AutoModelForMaskedLM
        lacks = set(auto.from_pretrained(path, output_loading_info=True)[1]["missing_keys"])
        assert source_draws == used & lacks and bool(lacks) == (kind == "bert-headless")
        assert all("@new" in plan.tags[n] for n, r in recipes.items() if r.key in lacks)


STATS_CONFIGS = {  # wide enough (256 x 512) for a spread measured to a few percent
    "bert": dict(model_type="bert", hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=512, vocab_size=512, max_position_embeddings=64),
    "roberta": dict(model_type="roberta", hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=512, vocab_size=512, max_position_embeddings=64, pad_token_id=1),
    "gpt2": dict(model_type="gpt2", n_embd=256, n_layer=2, n_head=4, n_inner=512, vocab_size=512, n_positions=64),
    **{t: dict(model_type=t, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=512, vocab_size=512, max_position_embeddings=64, tie_word_embeddings=False,
               pad_token_id=0, **({"head_dim": 64} if t.startswith("gemma") else {}))
       for t in ("llama", "mistral", "qwen2", "qwen3", "olmo2", "gemma", "gemma2", "gemma3_text", "phi3")},
}


@pytest.mark.parametrize("family", sorted(STATS_CONFIGS))
def test_new_parameters_start_as_the_stock_class_initialises_them(family):
    """Every parameter drawn by ``StockInit`` against the stock class's own init (``from_config``): a constant one
    (zero biases, unit norms, Gemma's zero norms, a zero padding row) bit for bit, a random one with the same mean
    and spread (initializer_range; GPT-2's residual projections scaled by 1/sqrt(2 n_layer))."""
    fields = dict(STATS_CONFIGS[family])
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    auto = AutoModelForMaskedLM if family in ("bert", "roberta") else AutoModelForCausalLM
    torch.manual_seed(0)
    stock = dict(auto.from_config(config, dtype=torch.float32).named_parameters())
    init = StockInit(skeleton(config), init_seed=3)
    for name, ref in stock.items():
        got = init.value(name)
        assert got.shape == ref.shape, name
        if torch.all(ref == ref.reshape(-1)[0]):  # a constant: the same constant
            assert torch.equal(got, ref), name
            continue
        std = ref.std().item()
        assert abs(got.std().item() - std) < 0.1 * std, (name, got.std().item(), std)
        assert abs(got.mean().item() - ref.mean().item()) < 5 * std / got.numel() ** 0.5 + 1e-3 * std, name
        zero_rows = (ref == 0).all(dim=-1) if ref.ndim == 2 else None
        if zero_rows is not None and zero_rows.any():  # a padding row
            assert torch.equal((got == 0).all(dim=-1), zero_rows), name


def test_xpt_ds_own_parameters_start_as_their_modules_do():
    """LoRA (peft's kaiming-uniform A, zero B), the adapters (N(0, 1e-3) down, zero elsewhere: the identity), TreLM
    (orthogonal language rows, zero placeholder)."""
    import math

    from xpt_ds.model.methods import lora
    fields = dict(STATS_CONFIGS["llama"])
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    setattr(config, lora.CONFIG_KEY, {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": list(lora.LLAMA_TARGETS),
                                      "fan_in_fan_out": False})
    init = StockInit(skeleton(config), init_seed=3)
    a = init.value("model.layers.0.self_attn.q_proj.lora_A.default.weight")
    bound = 1 / math.sqrt(256)  # kaiming_uniform(a=sqrt(5)) over fan_in 256
    assert a.shape == (8, 256) and a.abs().max() <= bound and a.std() > 0.5 * bound / math.sqrt(3)
    assert not init.value("model.layers.0.self_attn.q_proj.lora_B.default.weight").any()
    fields = dict(STATS_CONFIGS["bert"])
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    config.xpt_adapter_size = 16
    config.xpt_trelm_source_vocab_size, config.xpt_trelm_source_pad_id, config.xpt_position_offset = 90, 0, 0
    init = StockInit(skeleton(config), init_seed=3)
    down = init.value("bert.encoder.layer.0.output.adapter.down.weight")
    assert abs(down.std().item() - 1e-3) < 1e-4
    for part in ("down.bias", "up.weight", "up.bias"):
        assert not init.value(f"bert.encoder.layer.0.output.adapter.{part}").any(), part
    rows = init.value("trelm.language_embeddings.weight")
    torch.testing.assert_close(rows @ rows.T, torch.eye(2), atol=1e-5, rtol=0)
    assert not init.value("trelm.placeholder").any()


def test_a_new_parameters_value_depends_on_its_name_and_the_seed_alone(tiny_decoder, corpus):
    """Filled in reverse order, or after other draws moved the global generator: the same bits. Another
    init_seed: other bits. The global generator is left as it was."""
    cfg = _config(tiny_decoder("llama", False), corpus, "xpt")
    tok = build_tokenizer(cfg.tokenizer)
    plan = build_plan(cfg, tok)
    names = [n for n, _ in skeleton(plan.tcfg).named_parameters()]
    forward = {n: plan.values(n) for n in names}
    torch.manual_seed(123)
    state = torch.get_rng_state()
    backward = {n: plan.values(n) for n in reversed(names)}
    assert torch.equal(torch.get_rng_state(), state)
    assert [n for n in names if not torch.equal(forward[n], backward[n])] == []
    other = build_plan(dataclasses.replace(cfg, init_seed=12), tok)
    new = [n for n, r in plan.recipes.items() if r.kind != "source"]
    assert new and all(not torch.equal(other.values(n), forward[n]) for n in new if forward[n].std() > 0)
    assert param_seed(11, names[0]) != param_seed(11, names[1]) != param_seed(12, names[1])


def _values_digest(cfg, tok) -> str:
    from xpt_ds.training.fill import Digest
    plan = build_plan(cfg, tok)
    digest = Digest()
    for name, _ in skeleton(plan.tcfg).named_parameters():
        digest.update(f"hf.{name}", plan.values(name))
    return digest.hex()


@pytest.mark.multiproc
def test_one_rank_and_two_ranks_of_zero3_start_from_the_same_values(tiny_decoder, corpus, tmp_path):
    """The crc32 each rank computes over every name and value it filled (ZeRO-2 on one rank, ZeRO-3 on two: each
    rank fills only its partitions) is the one this process computes over the plan's values."""
    from conftest import REPO, base_config, launch, write_config
    source = tiny_decoder("llama", False)
    want = _values_digest(_config(source, corpus, "xpt"), build_tokenizer(str(corpus / "spm.model")))
    seen = {}
    for nproc, ds in ((1, "zero2_fp32"), (2, "zero3_fp32")):
        cfg = base_config(tmp_path / f"run{nproc}", source, corpus, deepspeed=str(REPO / f"ds_configs/{ds}.json"))
        cfg["model"]["init_seed"] = 11
        cfg["phases"] = [{"name": "phase1", "steps": 1, "lr": 1e-3}]
        proc = launch(["--config", str(write_config(tmp_path / f"c{nproc}.yaml", cfg))], nproc=nproc)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found = re.search(r"initial weights identical on all (\d) rank\(s\) \(crc32 ([0-9a-f]{8})\)", proc.stderr)
        assert found and int(found.group(1)) == nproc, proc.stderr[-2000:]
        seen[nproc] = found.group(2)
    assert seen == {1: want, 2: want}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_sharded_hub_layout_source_reads_as_stock_from_pretrained_reads_it(dtype, tiny_decoder, corpus, tmp_path,
                                                                            caplog):
    """``model-0000k-of-0000n.safetensors`` with ``model.safetensors.index.json`` (files of a few KB here), in bf16
    and fp32: the reused tensors are what ``from_pretrained`` gives, bit for bit, and the build says which shard
    it reads."""
    src = AutoModelForCausalLM.from_pretrained(tiny_decoder("llama", False)).to(dtype)
    src.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    shards = sorted(p.name for p in (tmp_path / "sharded").glob("model-*.safetensors"))
    assert len(shards) > 2 and (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    cfg = _config(tmp_path / "sharded", corpus, "xpt")
    with caplog.at_level(logging.INFO, logger="xpt_ds.model.values.source_files"):
        built = build_model(cfg, build_tokenizer(cfg.tokenizer))
    assert f"reading source shard 1 of {len(shards)}" in caplog.text
    want = dict(AutoModelForCausalLM.from_pretrained(tmp_path / "sharded", dtype=torch.float32).named_parameters())
    params = dict(built.model.named_parameters())
    reused = {f"model.layers.{i + 1}.{k[len(f'model.layers.{i}.'):]}": k for k in want for i in range(2)
              if k.startswith(f"model.layers.{i}.")} | {"model.norm.weight": "model.norm.weight"}
    assert [t for t, s in reused.items() if not torch.equal(params[t], want[s])] == []
    if dtype == torch.bfloat16:  # read as bf16 and widened: exact
        assert all(torch.equal(params[t], params[t].bfloat16().float()) for t in reused)


def test_bin_files_and_legacy_names_read_as_stock_from_pretrained_reads_them(tiny_bert, corpus_bert, tmp_path):
    """A ``pytorch_model.bin`` checkpoint (memory-mapped, plain data only) whose LayerNorm weights carry BERT's old
    ``gamma``/``beta`` names and whose keys lack the ``bert.`` prefix (a BertModel saved long ago)."""
    state = BertModel.from_pretrained(tiny_bert).state_dict()
    old = {}
    for k, v in state.items():
        k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        old[k] = v.clone()
    out = tmp_path / "old_bert"
    out.mkdir()
    torch.save(old, out / "pytorch_model.bin")
    AutoConfig.from_pretrained(tiny_bert).save_pretrained(out)
    cfg = _config(out, corpus_bert, "xpt")
    src_cfg = source_config(cfg)
    meta = source_skeleton(src_cfg)
    source = open_source(cfg, src_cfg, meta)
    assert source.kind == "bin" and source.missing == {n for n, _ in meta.named_parameters() if n.startswith("cls.")}
    want = dict(AutoModelForMaskedLM.from_pretrained(out).named_parameters())
    assert [n for n in source.names if not torch.equal(source.get(n), want[n])] == []
    assert "bert.embeddings.LayerNorm.weight" in source.names


def test_draws_are_cpu_float32_whatever_the_default_dtype(tiny_decoder, corpus):
    """Values are drawn on the CPU in float32 (the same bits on a GPU machine), even under another default dtype."""
    cfg = _config(tiny_decoder("llama", True), corpus, "xpt")
    plan = build_plan(cfg, build_tokenizer(cfg.tokenizer))
    name = next(n for n, r in plan.recipes.items() if r.kind == "init")
    before = torch.get_default_dtype()
    want = plan.values(name)
    torch.set_default_dtype(torch.float64)
    try:
        got = plan.values(name)
    finally:
        torch.set_default_dtype(before)
    assert got.dtype == want.dtype == torch.float32 and torch.equal(got, want)

