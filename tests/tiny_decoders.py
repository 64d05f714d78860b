"""Tiny decoder sources (2 layers, hidden 64, 120 rows) of every family xpt-ds builds, saved as a hub model is:
``save_tiny_decoder`` behind conftest's ``tiny_decoder`` fixture."""
from __future__ import annotations

from pathlib import Path


# The other families of Llama's module layout (xpt_ds.model.decoder.LLAMA_LAYOUT), each with what its tiny config
# needs: Gemma2 alternates sliding (4 positions) and full attention and softcaps its attention scores and final
# logits; Gemma3 text slides in its first layer only (a 2-layer pattern) with a local rope of its own.
OTHER_LLAMA_LAYOUT = {"qwen3": {}, "olmo2": {}, "phi3": {}, "gemma": {"head_dim": 32},
                      "gemma2": {"head_dim": 32, "sliding_window": 4},
                      "gemma3_text": {"head_dim": 32, "sliding_window": 4,
                                      "layer_types": ["sliding_attention", "full_attention"]}}


def save_tiny_decoder(out: Path, family: str, tied: bool, dropout: float = 0.1) -> Path:
    """A tiny GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or a family of
    ``OTHER_LLAMA_LAYOUT`` (2 layers, hidden 64, 120 rows), tied or untied head. Mistral and Qwen2 slide their
    attention over 4 positions: Mistral in every layer, Qwen2 in its second layer only (``layer_types`` [full,
    sliding]); ``qwen2_full`` is a Qwen2 of full attention in every layer, as released Qwen2 models are."""
    import torch
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed(7)
    ids = dict(vocab_size=120, bos_token_id=0, eos_token_id=2, pad_token_id=1, tie_word_embeddings=tied)
    llama = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 intermediate_size=128, max_position_embeddings=80, attention_dropout=dropout, **ids)
    if family == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=2, n_inner=128, n_positions=80,
                                           resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, **ids))
    elif family == "mistral":
        model = MistralForCausalLM(MistralConfig(sliding_window=4, **llama))
    elif family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(use_sliding_window=True, sliding_window=4, max_window_layers=1, **llama))
        assert model.config.layer_types == ["full_attention", "sliding_attention"]
    elif family == "qwen2_full":  # as Qwen2 and Qwen2.5 ship (use_sliding_window false), biases not zero
        model = Qwen2ForCausalLM(Qwen2Config(**llama))
        assert model.config.layer_types == ["full_attention", "full_attention"]
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                torch.nn.init.normal_(param, std=0.5)
    elif family in OTHER_LLAMA_LAYOUT:
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(family, **llama, **OTHER_LLAMA_LAYOUT[family]))
    else:
        model = LlamaForCausalLM(LlamaConfig(**llama))
    model.save_pretrained(out)
    return out
