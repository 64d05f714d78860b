"""``method: extend``'s split rows (xpt_ds.model.methods.extend), in process: the split modules compute what the stock
ones do, the row groups, EEVE's schedule as phases, and the one-line errors. The trained runs are test_extend_train."""
import json
import re

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from conftest import REPO
from xpt_ds.config import ConfigError
from xpt_ds.config.manager import load_unchecked
from xpt_ds.model.methods import extend
from xpt_ds.model.decoder import tag_parameters, DECODER_FAMILIES
from xpt_ds.model.phases import build_phase_trainables


def _stock(family: str, tied: bool, vocab: int = 50, pad: int | None = None):
    torch.manual_seed(0)
    if family == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=16, n_layer=1, n_head=2, n_positions=32,
                                          tie_word_embeddings=tied, pad_token_id=pad))
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=1, intermediate_size=32, tie_word_embeddings=tied,
                                        pad_token_id=pad))


def _split_twin(stock: nn.Module, old: int) -> nn.Module:
    """A copy of ``stock`` with its rows split at ``old`` and the same values."""
    import copy
    twin = copy.deepcopy(stock)
    emb, head = twin.get_input_embeddings().weight.detach(), twin.get_output_embeddings().weight.detach()
    extend.split_rows(twin, old)
    with torch.no_grad():
        split_in, split_out = twin.get_input_embeddings(), twin.get_output_embeddings()
        split_in.old_rows.copy_(emb[:old])
        split_in.new_rows.copy_(emb[old:])
        if split_out.old_rows is not split_in.old_rows:
            split_out.old_rows.copy_(head[:old])
            split_out.new_rows.copy_(head[old:])
    return twin


@pytest.mark.parametrize("family,tied", [("gpt2", True), ("llama", False), ("llama", True)])
def test_split_model_computes_the_stock_model_and_its_gradients(family, tied):
    stock = _stock(family, tied, pad=45).eval()  # the pad row is a new one: its gradient stays zero in both
    twin = _split_twin(stock, 40)
    ids = torch.tensor([[1, 39, 40, 45, 49, 3], [45, 0, 41, 2, 39, 48]])
    a, b = stock(ids).logits, twin(ids).logits
    assert torch.allclose(a, b, atol=1e-6, rtol=0)
    a.square().sum().backward()
    b.square().sum().backward()
    g_in = stock.get_input_embeddings().weight.grad
    split = twin.get_input_embeddings()
    assert torch.allclose(torch.cat([split.old_rows.grad, split.new_rows.grad]), g_in, atol=1e-5)
    if family == "llama" and not tied:  # Llama's padding_idx 45 gets no gradient from the input side, as in stock
        assert not split.new_rows.grad[5].any() and not g_in[45].any()
    names = [n for n, _ in twin.named_parameters()]
    stock_matrices = ("model.embed_tokens.weight", "transformer.wte.weight", "lm_head.weight")
    assert not set(stock_matrices) & set(names)
    assert (twin.get_output_embeddings().old_rows is split.old_rows) == tied
    assert set(extend.stock_names(twin)) == ({"transformer.wte.weight"} if family == "gpt2" else
                                             {"model.embed_tokens.weight"} | (set() if tied else {"lm_head.weight"}))


def test_split_embedding_keeps_a_scaled_embedding_scale():
    from transformers.models.gemma3.modeling_gemma3 import Gemma3TextScaledWordEmbedding
    stock = Gemma3TextScaledWordEmbedding(30, 8, padding_idx=0, embed_scale=8 ** 0.5)
    split = extend.SplitEmbedding(stock, 20)
    with torch.no_grad():
        split.old_rows.copy_(stock.weight[:20])
        split.new_rows.copy_(stock.weight[20:])
    ids = torch.tensor([[0, 5, 19, 20, 29]])
    assert torch.equal(split(ids), stock(ids))


@pytest.mark.parametrize("tied", [True, False])
def test_row_groups(tied):
    model = _split_twin(_stock("llama", tied), 40)
    tags = tag_parameters(model, DECODER_FAMILIES["llama"], {"model.embed_tokens.old_rows", "lm_head.old_rows"}, 1,
                          False)
    by_group = lambda g: {n for n, t in tags.items() if g in t}  # noqa: E731
    assert by_group("@new_rows") == {"model.embed_tokens.new_rows"}
    assert by_group("@old_rows") == {"model.embed_tokens.old_rows"}
    assert by_group("@new_head_rows") == ({"model.embed_tokens.new_rows"} if tied else {"lm_head.new_rows"})
    assert by_group("@old_head_rows") == ({"model.embed_tokens.old_rows"} if tied else {"lm_head.old_rows"})
    assert "@source" in tags["model.embed_tokens.old_rows"] and "@new" in tags["model.embed_tokens.new_rows"]


def test_eeve_schedule_is_a_phase_list():
    """launch/configs/extend_eeve.yaml: new input rows -> new head rows -> both -> all rows -> + layers."""
    cfg = load_unchecked(str(REPO / "launch/configs/extend_eeve.yaml"))
    assert cfg.model.method == "extend"
    model = _split_twin(_stock("llama", False), 40)
    tags = tag_parameters(model, DECODER_FAMILIES["llama"], {"model.embed_tokens.old_rows", "lm_head.old_rows"}, 1,
                          False)
    trains = build_phase_trainables(cfg, tags)
    rows = {"model.embed_tokens.new_rows", "model.embed_tokens.old_rows", "lm_head.new_rows", "lm_head.old_rows"}
    assert trains == [{"model.embed_tokens.new_rows"}, {"lm_head.new_rows"},
                      {"model.embed_tokens.new_rows", "lm_head.new_rows"}, rows, set(tags)]


def test_extend_without_its_report_is_one_line(tmp_path):
    src = type("S", (), {"vocab_size": 300})()
    with pytest.raises(ConfigError, match="has no extend_vocab.json; method extend takes"):
        extend.source_rows(str(tmp_path), 304, src, "SRC")
    (tmp_path / "extend_vocab.json").write_text(json.dumps({"source_size": 400}))
    with pytest.raises(ConfigError, match="extended from a tokenizer of 400 pieces, but model.source SRC has 300"):
        extend.source_rows(str(tmp_path), 404, src, "SRC")
    (tmp_path / "extend_vocab.json").write_text(json.dumps({"source_size": 304}))
    with pytest.raises(ConfigError, match="it adds nothing"):
        extend.source_rows(str(tmp_path), 304, src, "SRC")
    (tmp_path / "extend_vocab.json").write_text("{")
    with pytest.raises(ConfigError, match="unreadable"):
        extend.source_rows(str(tmp_path), 304, src, "SRC")


def test_extend_refuses_an_encoder_source_and_a_tokenizer_it_cannot_use(tmp_path, tiny_roberta):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models

    from xpt_ds.config import ModelConfig
    from xpt_ds.data.tokenizer import build_hf_tokenizer, tokenizer_for
    from xpt_ds.model.build import planned_target
    with pytest.raises(ConfigError, match=r"^config key 'model.method': extend is for decoder sources .*roberta mask"):
        planned_target(ModelConfig(source=str(tiny_roberta), method="extend"), None)
    with pytest.raises(ConfigError, match=r"^config key 'model.tokenizer': 'nowhere' is not a directory; method"):
        tokenizer_for(ModelConfig(source=str(tiny_roberta), method="extend", tokenizer="nowhere"))
    tk = Tokenizer(models.WordLevel({"<|endoftext|>": 0, "a": 1}, unk_token="<|endoftext|>"))
    eos_pad = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                      pad_token="<|endoftext|>")
    eos_pad.save_pretrained(tmp_path / "eos_pad")
    nothing_else = re.escape("has no pad other than its eos '<|endoftext|>' and no other special token to pad with")
    with pytest.raises(ConfigError, match=nothing_else):
        build_hf_tokenizer(str(tmp_path / "eos_pad"), causal=True)
    no_pad = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    no_pad.save_pretrained(tmp_path / "no_pad")
    with pytest.raises(ConfigError, match=nothing_else):
        build_hf_tokenizer(str(tmp_path / "no_pad"), causal=True)


def test_extend_needs_a_tokenizer_in_the_config():
    from xpt_ds.config import TrainConfig
    from xpt_ds.config.validate import problems
    cfg = TrainConfig()
    cfg.model.method, cfg.model.source = "extend", "some/source"
    assert any("'model.tokenizer' is required for method extend" in p for p in problems(cfg))
