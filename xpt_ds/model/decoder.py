"""XPT for decoder sources: a GPT-2- or Llama-family *ForCausalLM as the English model (docs/decoders.md).

``model.source`` is a directory, a hub id or a ``.gguf`` file (``source_location``). The target is a stock
GPT2LMHeadModel / LlamaForCausalLM (or Mistral, Qwen2, Qwen3, OLMo2, Gemma, Gemma2, Gemma3 text, Phi-3: Llama's
layout, ``LLAMA_LAYOUT``; all tested from tiny configs) with L+2 layers, built from the source's own config, so
export is a plain ``save_pretrained``: layer 0 is ITL_in, layers 1..L are the reused source layers, layer L+1 is
ITL_out, each a decoder layer of the source's architecture. Building the L+2-layer model from its config gives every
layer its own ``layer_idx`` (the KV cache slot) and the shared rotary embedding (Llama) or learned positions
(GPT-2); only weights are copied, so the model is consistent as built. New: the input embeddings of the
SentencePiece vocabulary and, for an untied source, the output head's rows, both from ``model.embedding_init`` (over
the source's input and output matrices respectively); the ITLs.

Tags as the encoder builder's (``xpt_ds.model.build``): ``@new``/``@source``, ``@itl``, ``@decoder`` (the reused
layers, with ``@lower``/``@upper``), ``@embeddings`` (input rows), ``@output_embeddings`` (an untied head),
``@position`` (GPT-2's learned positions), ``@lm_head`` (the final norm, the decoder's head-side transform) and
``@lora`` (``method: lora``'s low-rank updates, ``xpt_ds.model.methods.lora``; new, inside the reused layers) and
``method: extend``'s row groups ``@old_rows`` / ``@new_rows`` and ``@old_head_rows`` / ``@new_head_rows``
(``xpt_ds.model.methods.extend``).
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from xpt_ds.config import ConfigError, ModelConfig
from xpt_ds.config.methods import METHODS
from xpt_ds.data.tokenizer import TargetTokenizer
from xpt_ds.model.methods import extend, lora
from xpt_ds.model.values.plan import CopyRule

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecoderFamily:
    base: str  # attribute of the base model (also HF's base_model_prefix)
    layers: str  # the ModuleList of decoder layers, in the base model
    embeddings: str  # input embeddings, in the base model
    norm: str  # the final norm, in the base model
    positions: str = ""  # learned position embeddings (GPT-2); empty: rotary (Llama)


_LLAMA = DecoderFamily("model", "layers", "embed_tokens", "norm")
ATTENTION_DROPOUT_KEYS = ("attn_pdrop", "attention_dropout")  # GPT-2's, the Llama layout's
# Llama's module layout: model.embed_tokens, model.layers, model.norm (each tested from a tiny config). What differs
# inside a layer (Qwen3's, OLMo2's and Gemma3's q/k norms, Gemma2/3's extra norms, Phi-3's fused qkv and gate-up
# maps, sliding-window layer_types) comes with the layer; Gemma's sqrt(hidden) embedding scale is in its model's
# forward; Gemma2's final-logit softcap is applied by the objective (xpt_ds.model.forward.causal_lm), its attention
# softcap needs eager attention (_stock_skeleton).
LLAMA_LAYOUT = ("llama", "mistral", "qwen2", "qwen3", "olmo2", "gemma", "gemma2", "gemma3_text", "phi3")
DECODER_FAMILIES = {"gpt2": DecoderFamily("transformer", "h", "wte", "ln_f", positions="wpe"),
                    **{model_type: _LLAMA for model_type in LLAMA_LAYOUT}}
DECODER_METHODS = tuple(m.name for m in METHODS.values() if not m.adapters and not m.trelm)


def is_decoder(config) -> bool:
    """Whether an HF config (its ``config.json`` as a dict, or its model_type) is a decoder family built here."""
    if isinstance(config, dict):
        config = config.get("model_type", "")
    return (config if isinstance(config, str) else getattr(config, "model_type", "")) in DECODER_FAMILIES


def is_causal_lm(config: dict) -> bool:
    """Whether a ``config.json`` (as a dict) is a decoder: a family built here, or any architecture transformers
    names a causal LM (``*ForCausalLM``, ``*LMHeadModel``)."""
    archs = config.get("architectures") or []
    return is_decoder(config) or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)


def check_decoder_method(method: str, model_type: str) -> None:
    if method not in DECODER_METHODS:
        raise ConfigError(f"config key 'model.method': '{method}' is not available for a decoder source "
                          f"({model_type}); valid: {', '.join(DECODER_METHODS)}")


def source_location(source: str) -> tuple[str, dict]:
    """(what ``from_pretrained`` takes, its extra arguments): a path ending in ``.gguf`` is a GGUF file, read by
    transformers (dequantized to fp32) from its directory with ``gguf_file``; anything else as it is."""
    if not source.endswith(".gguf"):
        return source, {}
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"config key 'model.source': GGUF file not found: {source}")
    return str(path.parent), {"gguf_file": path.name}


def target_config(src_cfg, cfg: ModelConfig, tok: TargetTokenizer):
    """The target's HF config: the source's with the new vocabulary, L+2 layers (ITLs) and the run's ids."""
    if getattr(src_cfg, "scale_attn_by_inverse_layer_idx", False):
        raise ConfigError(f"config key 'model.source': {cfg.source} scales attention by layer index "
                          "(scale_attn_by_inverse_layer_idx), so the reused layers would compute differently "
                          "one index later; not supported")
    tcfg = copy.deepcopy(src_cfg)
    drop_source_code(tcfg)
    tcfg.vocab_size = tok.vocab_size
    if METHODS[cfg.method].vocab == "source":  # continued pretraining: the source's rows, as many as it has
        if tok.vocab_size > src_cfg.vocab_size:
            raise ConfigError(f"tokenizer {tok.path} has {tok.vocab_size} entries but model.source has only "
                              f"{src_cfg.vocab_size} embedding rows: it is not the source's tokenizer")
        tcfg.vocab_size = src_cfg.vocab_size
    L = src_cfg.num_hidden_layers
    if METHODS[cfg.method].has_itl:
        tcfg.num_hidden_layers = L + 2
        if isinstance(getattr(tcfg, "layer_types", None), list):  # per-layer attention kinds (Qwen2, Mistral)
            tcfg.layer_types = [tcfg.layer_types[0], *tcfg.layer_types, tcfg.layer_types[-1]]
    tcfg.pad_token_id, tcfg.bos_token_id, tcfg.eos_token_id = tok.pad_id, tok.cls_id, tok.sep_id
    tcfg.tie_word_embeddings = bool(getattr(src_cfg, "tie_word_embeddings", False))
    tcfg.xpt_method = cfg.method
    tcfg.xpt_max_length = src_cfg.max_position_embeddings
    if METHODS[cfg.method].vocab == "extend":
        setattr(tcfg, extend.CONFIG_KEY, extend.source_rows(tok.path, tok.vocab_size, src_cfg, cfg.source))
    if METHODS[cfg.method].lora:
        setattr(tcfg, lora.CONFIG_KEY, lora.lora_settings(cfg.lora, src_cfg.model_type))
    if cfg.dropout >= 0:
        for key in ("resid_pdrop", "embd_pdrop", *ATTENTION_DROPOUT_KEYS):
            if hasattr(tcfg, key):
                setattr(tcfg, key, cfg.dropout)
    return tcfg


def drop_source_code(tcfg) -> None:
    """The source's ``auto_map`` (code its directory ships, which xpt-ds never runs) names files the target's
    checkpoints and export do not carry: it is not the target's. An export that needs code of its own (adapters,
    TreLM) writes its own map (``xpt_ds.export.hf.save_model``)."""
    if hasattr(tcfg, "auto_map"):
        del tcfg.auto_map


def decoder_skeleton(tcfg) -> nn.Module:
    """The target architecture from its HF config (fp32, SDPA), with the LoRA layers it records and the split rows
    of ``method: extend`` (``xpt_ds.model.methods.extend``)."""
    model = _stock_skeleton(tcfg)
    settings = getattr(tcfg, lora.CONFIG_KEY, None)
    if settings:
        model = lora.add_lora(model, settings)
    if extend.extended_rows(tcfg):
        model.tie_weights()  # tied first (the stock tie), then split: the head takes the embedding's parts
        extend.split_rows(model, extend.extended_rows(tcfg))
    return model


def attention_kernel(tcfg) -> str:
    """SDPA, except for a model whose attention scores are softcapped (Gemma2), which SDPA would leave uncapped."""
    return "eager" if getattr(tcfg, "attn_logit_softcapping", None) else "sdpa"


def pinned_attention(tcfg) -> str | None:
    """The attention an export's config.json names (``attn_implementation``) so that stock ``from_pretrained``
    computes as the model trained under every transformers 5 release: ``eager`` for softcapped scores (5.24 picks
    it by itself; 5.17 picks SDPA for Gemma2, whose logits then differ); None, the loader's choice, elsewhere."""
    return "eager" if is_decoder(tcfg) and attention_kernel(tcfg) == "eager" else None


def _stock_skeleton(tcfg) -> nn.Module:
    return AutoModelForCausalLM.from_config(copy.deepcopy(tcfg), attn_implementation=attention_kernel(tcfg),
                                            dtype=torch.float32)


def decoder_rules(cfg: ModelConfig, family: DecoderFamily, src_cfg) -> list[CopyRule]:
    """Which target parameters are the source's (``xpt_ds.model.values.plan``): its L layers one index later (past
    ITL_in), its final norm and GPT-2's learned positions; with ``itl_init: copy`` the ITLs as its first and last
    layers (still new); for a method that keeps the source's vocabulary (keep_vocab: continued pretraining) its
    input embeddings and head too, so the target is the source. LoRA's base weights are the source's under their
    stock names (``lora.base_name``)."""
    method = METHODS[cfg.method]
    if method.source == "none":
        return []
    b, L = family.base, src_cfg.num_hidden_layers
    off = 1 if method.has_itl else 0
    layers = f"{b}.{family.layers}"
    rules = [CopyRule(f"{layers}.{i + off}.", f"{layers}.{i}.") for i in range(L)]
    rules.append(CopyRule(f"{b}.{family.norm}.", f"{b}.{family.norm}."))
    if family.positions:
        rules.append(CopyRule(f"{b}.{family.positions}.", f"{b}.{family.positions}."))
    if method.vocab == "source":  # a tied head is the embedding's parameter: one rule copies both
        rules += [CopyRule(f"{b}.{family.embeddings}.", f"{b}.{family.embeddings}."), CopyRule("lm_head.", "lm_head.")]
    if off and cfg.itl_init == "copy":
        rules += [CopyRule(f"{layers}.0.", f"{layers}.0.", tagged=False),
                  CopyRule(f"{layers}.{L + 1}.", f"{layers}.{L - 1}.", tagged=False)]
    return rules


def _row_tags(name: str, tied: bool) -> set[str]:
    """method extend's row groups: @old_rows / @new_rows of the input embedding, @old_head_rows / @new_head_rows
    of the head (of a tied head, the same two parameters)."""
    part = name.rsplit(".", 1)[-1]
    if part not in (extend.OLD, extend.NEW):
        return set()
    kind = part.removesuffix("_rows")
    if name.startswith("lm_head."):
        return {f"@{kind}_head_rows"}
    return {f"@{kind}_rows", f"@{kind}_head_rows"} if tied else {f"@{kind}_rows"}


def tag_parameters(model, family: DecoderFamily, copied: set[str], L: int, has_itl: bool) -> dict[str, set[str]]:
    off = 1 if has_itl else 0
    layers = f"{family.base}.{family.layers}."
    itl = (f"{layers}0.", f"{layers}{L + 1}.") if has_itl else ()
    halves = {f"{layers}{i + off}.": "@lower" if i < L // 2 else "@upper" for i in range(L)}
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    tags = {}
    for name, _ in model.named_parameters():
        t = {"@all", "@source" if lora.base_name(name) in copied else "@new"} | _row_tags(name, tied)
        if lora.is_lora(name):
            t.add("@lora")
        if name.startswith(itl):
            t.add("@itl")
        elif name.startswith(layers):
            t |= {"@decoder", *(h for p, h in halves.items() if name.startswith(p))}
        if name.startswith(f"{family.base}.{family.embeddings}."):
            t.add("@embeddings")
        elif name.startswith("lm_head."):
            t.add("@output_embeddings")
        elif family.positions and name.startswith(f"{family.base}.{family.positions}."):
            t.add("@position")
        elif name.startswith(f"{family.base}.{family.norm}."):
            t.add("@lm_head")
        tags[name] = t
    return tags
