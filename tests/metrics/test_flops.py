"""The FLOPs behind ``train/mfu``: ``matmul_params`` counts exactly the weights the model multiplies, for the
decoder layouts whose attention width is the hidden size and for Gemma's, whose heads are set apart from it."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma2Config, LlamaConfig, Qwen2Config

from xpt_ds.metrics.logger import attention_width, flops_per_token, matmul_params

SHAPE = dict(vocab_size=100, hidden_size=96, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)


@pytest.mark.parametrize("config", [LlamaConfig(**SHAPE), Qwen2Config(**SHAPE),
                                    Gemma2Config(**SHAPE, head_dim=32),  # 4 heads of 32 in 96: narrower
                                    Gemma2Config(**SHAPE, head_dim=48)],  # 4 of 48: wider
                         ids=["llama", "qwen2", "gemma2-narrow", "gemma2-wide"])
def test_matmul_params_are_the_weights_each_token_multiplies(config):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layers = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    head = model.lm_head.weight.numel()
    assert matmul_params(config, 1.0) == layers + head
    assert matmul_params(config, 0.25) == layers + 0.25 * head
    heads = config.num_attention_heads * getattr(config, "head_dim", config.hidden_size // 4)
    assert attention_width(config) == heads
    assert flops_per_token(config, 64, 1.0) == 6 * (layers + head) + 12 * 2 * heads * 64
