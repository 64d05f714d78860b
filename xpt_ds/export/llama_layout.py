"""A Qwen2 target with a vocabulary of its own, exported as a Llama model that computes the same function.

transformers 5 loads the tokenizer of any ``model_type: qwen2`` directory as its own ``Qwen2Tokenizer``, whatever
class ``tokenizer_config.json`` names: a byte-level BPE rebuilt from the vocabulary, which gives other ids than
the run's SentencePiece model (``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS`` in ``tokenization_auto``). So a
stock ``AutoTokenizer`` + ``AutoModelForCausalLM`` pipeline (lm-eval, a serving stack) would feed such an export
the wrong ids. A Qwen2 layer with full attention is a Llama layer with biases on q, k and v
(``attention_bias``, which also gives o_proj a bias: zero here), so the export is written as ``LlamaForCausalLM``,
whose tokenizer loads as written; its logits are the checkpoint's bit for bit
(``tests/training/test_decoder_train.py``). A Qwen2 target with sliding-window layers has no Llama form and is
exported as Qwen2, with the export's warning about the tokenizer; a run that keeps the source's tokenizer
(``keep_vocab``, ``extend``) stays Qwen2, whose tokenizer it is.
"""
from __future__ import annotations

# Qwen2Config's keys that LlamaConfig does not have, or that would be wrong there
QWEN2_ONLY = ("model_type", "architectures", "transformers_version", "layer_types", "use_sliding_window",
              "sliding_window", "max_window_layers")
ZERO_BIAS = ".self_attn.o_proj.bias"  # what attention_bias adds that Qwen2 lacks


def as_llama(cfg):
    """``cfg`` (a Qwen2 config) as the LlamaConfig of the same function, or None where it has none: another
    model type, or a layer with sliding-window attention."""
    from transformers import LlamaConfig
    if cfg.model_type != "qwen2":
        return None
    kinds = getattr(cfg, "layer_types", None) or (
        ["sliding_attention"] if getattr(cfg, "use_sliding_window", False) else ["full_attention"])
    if any(kind != "full_attention" for kind in kinds):
        return None
    fields = {k: v for k, v in cfg.to_dict().items() if k not in QWEN2_ONLY}
    return LlamaConfig(**fields, attention_bias=True, mlp_bias=False)
