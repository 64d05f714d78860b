"""model.attention (xpt_ds.model.forward.document_mask): FlexAttention with a document BlockMask gives the logits SDPA's
dense block-diagonal mask gives, keeps a packed row's documents apart, skips the blocks that are wholly masked,
and is refused in one line where it cannot run. On the CPU FlexAttention runs forward only (torch has no backward
for it there); tests/gpu/test_cuda_document_mask.py trains with it on CUDA."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import yaml
from conftest import base_config, one_error_line, write_config

from xpt_ds.config import ConfigError, DataConfig, ModelConfig
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.model.build import build_model
from xpt_ds.model.preflight import check_source
from xpt_ds.model.forward.causal_lm import CausalLMObjective
from xpt_ds.model.forward.document_mask import check_window, document_block_mask, document_ids
from xpt_ds.model.forward.objective import build_objective


def _positions(lengths: list[list[int]]) -> torch.Tensor:
    """[B, T] position ids restarting at each document of the given lengths (each row's lengths sum to T)."""
    return torch.stack([torch.cat([torch.arange(n) for n in row]) for row in lengths])


def test_the_block_mask_is_causal_within_documents_and_skips_whole_blocks():
    pos = _positions([[100, 300, 112], [512], [128, 128, 256]])
    docs = document_ids(pos)
    assert docs[0, 99] == 1 and docs[0, 100] == 2 and docs[0, 400] == 3 and (docs[1] == 1).all()
    mask = document_block_mask(pos)
    q, k, v = (torch.randn(3, 2, 512, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    dense = (docs[:, None, :, None] == docs[:, None, None, :]) & torch.ones(512, 512, dtype=torch.bool).tril()
    from torch.nn.attention.flex_attention import flex_attention
    assert torch.allclose(flex_attention(q, k, v, block_mask=mask),
                          F.scaled_dot_product_attention(q, k, v, attn_mask=dense), atol=1e-5)
    # 128 x 128 blocks: 4 query blocks, 1 + 2 + 3 + 4 = 10 key blocks to read in a causal row. Row 2's documents
    # fill whole blocks, so every block across a boundary is skipped: 1 + 1 + 1 + 2 = 5. Row 0's boundaries fall
    # inside blocks, which are read (masked inside): 10.
    visited = mask.kv_num_blocks + mask.full_kv_num_blocks
    assert visited[:, 0].sum(-1).tolist() == [10, 10, 5]


@pytest.mark.parametrize("family,tied", [("llama", False), ("qwen3", True)])
def test_flex_logits_and_loss_equal_sdpas_and_documents_stay_apart(family, tied, tiny_decoder, corpus):
    tok = build_tokenizer(str(corpus / "spm.model"))
    cfg = ModelConfig(source=str(tiny_decoder(family, tied, 0.0)), tokenizer=tok.path)
    sdpa_model = build_model(cfg, tok).model.eval()
    flex_model = build_model(cfg, tok).model.eval()
    sdpa, flex = build_objective(sdpa_model), build_objective(flex_model, attention="flex")
    assert isinstance(flex, CausalLMObjective) and flex_model.config._attn_implementation == "flex_attention"
    pos = _positions([[20, 30, 14], [64], [5, 59]])
    ids = torch.randint(5, tok.vocab_size, (3, 64), generator=torch.Generator().manual_seed(0))
    ids[pos == 0] = tok.cls_id
    predict = torch.arange(3 * 64 - 1)
    batch = dict(input_ids=ids, position_ids=pos, mlm_positions=predict, mlm_targets=ids.flatten()[predict + 1])
    with torch.no_grad():
        a, b = sdpa(**batch, return_logits=True), flex(**batch, return_logits=True)
        assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()
        assert torch.allclose(sdpa(**batch), flex(**batch), atol=1e-5)
        # The second document of row 0 read alone gives the logits it gets inside the packed row.
        alone = flex(input_ids=ids[:1, 20:50], position_ids=pos[:1, 20:50], mlm_positions=torch.arange(30),
                     mlm_targets=ids[0, 21:51], return_logits=True)
    assert torch.allclose(alone, b[20:50], atol=1e-4)


def test_flex_is_refused_where_it_cannot_run(tiny_decoder, tiny_roberta, corpus, tmp_path):
    data = DataConfig()
    with pytest.raises(ConfigError, match=r"'model.attention' is 'flex', which is for decoder sources; .* is a "
                                          r"roberta masked LM: leave it at 'sdpa'$"):
        check_source(ModelConfig(source=str(tiny_roberta), attention="flex"), data)
    with pytest.raises(ConfigError, match=r"transformers has no FlexAttention for gpt2: leave it at 'sdpa'$"):
        check_source(ModelConfig(source=str(tiny_decoder("gpt2", True, 0.0)), attention="flex"), data)
    with pytest.raises(ConfigError, match=r"has no attention dropout, but the model's is 0.1 \(the source config\); "
                                          r"set model.dropout: 0$"):
        check_source(ModelConfig(source=str(tiny_decoder("llama", True, 0.1)), attention="flex"), data)
    check_source(ModelConfig(source=str(tiny_decoder("llama", True, 0.1)), attention="flex", dropout=0.0), data)
    from transformers import MistralConfig
    check_window(MistralConfig(sliding_window=None), 64)
    check_window(MistralConfig(sliding_window=4096), 2048)
    with pytest.raises(ConfigError, match=r"mistral's layers attend within a sliding window of 4 tokens, shorter "
                                          r"than data.seq_len 64; use 'sdpa'$"):
        check_window(MistralConfig(sliding_window=4), 64)
    # Through the trainer: a bad value, and flex on this CPU, are one line each before anything is built.
    from processes import run_main
    for value, needle in (("flash", "config key 'model.attention' is 'flash'; valid: sdpa, flex"),
                          ("flex", "'model.attention' is 'flex', which trains on CUDA only (torch has no "
                                   "FlexAttention backward on cpu); use 'sdpa'")):
        cfg = base_config(tmp_path / value, tiny_decoder("llama", True, 0.0), corpus)
        cfg["model"]["attention"] = value
        proc = run_main("xpt_ds.cli.train", ["--config", str(write_config(tmp_path / f"{value}.yaml", cfg))])
        one_error_line(proc.returncode, proc.stderr, needle)
        assert not (tmp_path / value / "checkpoints").exists(), yaml.safe_dump(cfg)
