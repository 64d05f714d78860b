"""A source checkpoint that is not the stock architecture of its model_type (its own model code under a stock
model_type, or weights of the reused parts missing) is one error line, not a model whose layers start random."""
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from xpt_ds.config import ConfigError, ModelConfig
from xpt_ds.model.build import load_source_model

AUTO_MAP = {"AutoConfig": "bert_layers.BertConfig", "AutoModelForMaskedLM": "bert_layers.BertForMaskedLM"}


def _copy(src: Path, dst: Path, auto_map: dict | None = None, edit=None) -> Path:
    """A copy of the source ``src`` whose config.json gets ``auto_map`` and whose weights ``edit`` changes."""
    shutil.copytree(src, dst)
    if auto_map:
        cfg = json.loads((dst / "config.json").read_text())
        (dst / "config.json").write_text(json.dumps({**cfg, "auto_map": auto_map}))
    if edit:
        weights = dst / "model.safetensors"
        state = load_file(weights)
        edit(state)
        save_file(state, weights, metadata={"format": "pt"})
    return dst


def _load(source: Path):
    return load_source_model(ModelConfig(source=str(source), tokenizer="unused.model"))


def _drop_position_embeddings(state: dict) -> None:  # ALiBi in place of positions, as MosaicBERT's
    for k in [k for k in state if "position_embeddings" in k]:
        del state[k]


def _add_gated_layer(state: dict) -> None:  # a weight of the ship's own layer, which the stock class has no use for
    state["bert.encoder.layer.0.mlp.gated_layers.weight"] = torch.zeros(4, 4)


def test_source_code_with_weights_the_stock_class_leaves_unused_is_refused(tiny_bert, tmp_path):
    src = _copy(tiny_bert, tmp_path / "mosaic", AUTO_MAP, _add_gated_layer)
    with pytest.raises(ConfigError) as e:
        _load(src)
    msg = str(e.value)
    assert msg == (f"config key 'model.source': {src} holds 1 weight(s) the stock BertForMaskedLM does not use "
                   "(first: bert.encoder.layer.0.mlp.gated_layers.weight): it is not the bert architecture "
                   "transformers defines; its config.json names its own model code (AutoModelForMaskedLM -> "
                   "bert_layers.BertForMaskedLM), which xpt-ds does not run"), msg


def test_source_code_without_position_embeddings_is_refused(tiny_bert, tmp_path):
    src = _copy(tiny_bert, tmp_path / "alibi", AUTO_MAP, _drop_position_embeddings)
    with pytest.raises(ConfigError, match=r"lacks 1 weight\(s\) the stock BertForMaskedLM needs beyond its LM head "
                       r"\(first: bert\.embeddings\.position_embeddings\.weight\), which would start random: .*"
                       r"names its own model code \(AutoModelForMaskedLM -> bert_layers\.BertForMaskedLM\)"):
        _load(src)


def test_a_plain_checkpoint_missing_an_encoder_weight_is_refused(tiny_roberta, tmp_path):
    def drop(state):
        del state["roberta.encoder.layer.1.attention.self.query.weight"]
    src = _copy(tiny_roberta, tmp_path / "partial", edit=drop)
    with pytest.raises(ConfigError) as e:
        _load(src)
    assert str(e.value) == (f"config key 'model.source': {src} lacks 1 weight(s) the stock RobertaForMaskedLM "
                            "needs beyond its LM head (first: roberta.encoder.layer.1.attention.self.query.weight), "
                            "which would start random: it is not the roberta architecture transformers defines")


def test_source_code_the_stock_class_loads_whole_trains_as_it_with_a_warning(tiny_bert, tmp_path, caplog):
    src = _copy(tiny_bert, tmp_path / "shipped", AUTO_MAP)
    with caplog.at_level(logging.WARNING, logger="xpt_ds.model.values.source_weights"):
        model, missing = _load(src)
    assert missing == set() and type(model).__name__ == "BertForMaskedLM"
    assert [r.getMessage() for r in caplog.records] == [
        f"source {src}: its config.json names its own model code (AutoModelForMaskedLM -> "
        "bert_layers.BertForMaskedLM), which xpt-ds does not run; the stock BertForMaskedLM loaded every weight it "
        "holds, and it trains as that"]
    plain, _ = _load(tiny_bert)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), plain.state_dict().values()))


def test_a_head_less_checkpoint_with_other_weights_still_loads(tiny_bert, tmp_path):
    """An encoder-only checkpoint lacks the LM head and may carry others (a pooler): as before, no error."""
    from transformers import BertModel
    BertModel.from_pretrained(tiny_bert, add_pooling_layer=True).save_pretrained(tmp_path)
    _, missing = _load(tmp_path)
    assert missing and all(k.startswith("cls.") for k in missing)


def test_a_decoder_missing_a_layer_weight_is_refused(tiny_decoder, tmp_path):
    def drop(state):
        del state["model.layers.0.mlp.up_proj.weight"]
    src = _copy(tiny_decoder("llama", False), tmp_path / "llama", edit=drop)
    with pytest.raises(ConfigError, match=r"lacks 1 weight\(s\) the stock LlamaForCausalLM needs beyond its LM head "
                       r"\(first: model\.layers\.0\.mlp\.up_proj\.weight\)"):
        _load(src)
