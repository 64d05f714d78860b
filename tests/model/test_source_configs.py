"""What a source's config.json says that the build must heed before it reads a weight: a quantized checkpoint
(``quantization_config``) is refused in one line, an attention implementation this machine lacks
(``_attn_implementation: flash_attention_2``) is not used to build the source's skeleton, and a RoBERTa source
whose pad id is below the target tokenizer's allows only the positions the target model holds."""
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

from xpt_ds.config import ConfigError, DataConfig, ModelConfig, TrainConfig
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.model.build import build_model, load_source_model, planned_target, source_config, source_skeleton
from xpt_ds.model.preflight import check_data_fits, plan_target


def _edited(src: Path, dst: Path, **keys) -> Path:
    """A copy of source ``src`` whose config.json gets ``keys``."""
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, **keys}))
    return dst


@pytest.mark.parametrize("quant", [{"quant_method": "fp8", "activation_scheme": "dynamic",
                                    "weight_block_size": [128, 128]},
                                   {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                    "bnb_4bit_quant_type": "nf4"}])
def test_a_quantized_source_is_one_line_before_any_weight_is_read(quant, tiny_decoder, corpus, tmp_path):
    """FP8 codes were read as values (|max| 448 where the source's was 0.07) and packed 4-bit weights died with a
    shape traceback; the weights here are not even a safetensors file, so the line comes before any is read. The
    train run's preflight (also for keep_vocab, before the source's tokenizer), the build and the probe's source
    load all say it."""
    src = _edited(tiny_decoder("llama", False), tmp_path / "quantized", quantization_config=quant)
    (src / "model.safetensors").write_bytes(b"not weights")
    line = (f"config key 'model.source': {src} is a quantized checkpoint (quant_method {quant['quant_method']}): "
            "its files hold codes and scales, not the weights; give the unquantized model")
    cfg = ModelConfig(source=str(src), tokenizer=str(corpus / "spm.model"))
    tok = build_tokenizer(cfg.tokenizer)
    for start in (lambda: source_config(cfg), lambda: build_model(cfg, tok), lambda: load_source_model(cfg),
                  lambda: plan_target(TrainConfig(model=cfg)),
                  lambda: plan_target(TrainConfig(model=ModelConfig(source=str(src), method="keep_vocab")))):
        with pytest.raises(ConfigError) as e:
            start()
        assert str(e.value) == line


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_source_config_naming_flash_attention_builds_without_it(family, tiny_decoder, corpus, tmp_path):
    """A config.json saved naming flash_attention_2 on a machine without flash-attn: the source's skeleton takes
    the target's attention (SDPA), as the target's does, and the build reuses its layers. transformers before 5.25
    reads the name from ``_attn_implementation``, 5.25 from ``attn_implementation`` only: the file holds both."""
    plain = tiny_decoder(family, True)
    src = _edited(plain, tmp_path / "fa", _attn_implementation="flash_attention_2",
                  attn_implementation="flash_attention_2")
    assert source_config(ModelConfig(source=str(src)))._attn_implementation == "flash_attention_2"
    assert source_skeleton(source_config(ModelConfig(source=str(src)))).config._attn_implementation == "sdpa"
    cfg = ModelConfig(source=str(src), tokenizer=str(corpus / "spm.model"))
    built = build_model(cfg, build_tokenizer(cfg.tokenizer)).model
    reference = build_model(ModelConfig(source=str(plain), tokenizer=cfg.tokenizer),
                            build_tokenizer(cfg.tokenizer)).model
    state, expected = built.state_dict(), reference.state_dict()
    assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in state)


def test_a_roberta_source_whose_pad_is_below_the_targets_allows_the_positions_the_target_holds(corpus, tmp_path):
    """Source pad 0, target pad 1: target token i (from 1) sits on row 1 + i, so 80 rows hold 78 tokens, not the
    79 the source's own pad allowed (training died with 'index 80 is out of bounds'; the export's tokenizer said
    79). At the limit the model runs; one more is refused by the preflight in one line."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    from conftest import TINY
    src = tmp_path / "roberta_pad0"
    torch.manual_seed(7)
    RobertaForMaskedLM(RobertaConfig(**TINY, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                                     type_vocab_size=1)).save_pretrained(src)
    cfg = ModelConfig(source=str(src), tokenizer=str(corpus / "spm.model"))
    tok = build_tokenizer(cfg.tokenizer)
    assert tok.pad_id == 1
    _, tcfg = planned_target(cfg, tok)
    assert tcfg.xpt_max_length == TINY["max_position_embeddings"] - 2 == 78
    model = build_model(cfg, tok).model.eval()
    ids = torch.randint(5, 100, (1, tcfg.xpt_max_length + 1))
    with torch.no_grad():
        model(input_ids=ids[:, :tcfg.xpt_max_length])
        with pytest.raises((IndexError, RuntimeError), match="out of bounds"):  # one more: past the position rows
            model(input_ids=ids)
    check_data_fits(tcfg, DataConfig(seq_len=78, train_shards=["x"]))
    with pytest.raises(ConfigError) as e:
        check_data_fits(tcfg, DataConfig(seq_len=79, train_shards=["x"]))
    assert str(e.value) == "config key 'data.seq_len' is 79; the source model's positions allow at most 78"
