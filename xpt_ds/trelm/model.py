"""TreLM's model (004 §3.1): a TRILayer between the two halves of a stock *ForMaskedLM's encoder, language
embeddings, and the English vocabulary beside the target's.

Layout. With N encoder layers the lower half is ``encoder.layer[0 .. N/2-1]`` (tag ``@lower``) and the upper
half ``encoder.layer[N/2 .. N-1]`` (``@upper``). The TRILayer runs between them (N + 1 layers in the forward
pass); it is a layer of the encoder's own class and starts as a copy of ``encoder.layer[N/2-1]``, the layer it
follows (004 §3.2: "initialized with parameters of Transformer layer l_{N/2}", counted from 1). Everything TreLM
adds lives in one submodule, ``trelm``, of the stock model, so every other parameter keeps its Hugging Face name
and the state dict is the stock one plus ``trelm.*``:

- ``trelm.trilayer`` (``@trilayer``).
- ``trelm.placeholder`` (``@trilayer``): a learned [d] vector, the TRILayer input of a target position that no
  source position is aligned to. 004 appends a placeholder token [P] to every input and lets the lower half
  encode it; a vector does the same job without lengthening the input. It starts at zero, so an unaligned
  position first sees only its position and language rows.
- ``trelm.language_embeddings`` (``@lang``): [2, d], row 0 English, row 1 the target. The input language's row is
  added to the word embeddings (before the embedding LayerNorm: E_inp = E_wrd + E_seg + E_pos + E_lng); the
  output language's row and the position rows are added to the TRILayer's input (H_TL = TRILayer(H~ + E_lng +
  E_pos)). Both rows start orthogonal (``TreLMParts.reset_xpt_parameters``); the authors' code left one row
  uninitialised.
- ``trelm.source_word_embeddings`` and ``trelm.source_lm_bias`` (``@source``, ``@embeddings`` / ``@lm_head_bias``):
  the English vocabulary, copied from the source.

Vocabulary. 004 trains one WordPiece vocabulary on both languages. Here the two are separate, as in 004 Table
8's CdLM* row: English is in the source's own Hugging Face tokenizer ids, read through the source's word
embeddings and predicted through the shared head transform, a decoder tied to those embeddings and the source's
head bias; the target uses the new SentencePiece vocabulary (``model.tokenizer``), its new embeddings
(``model.embedding_init``) and the stock head. So target shards made for the other methods stay valid, and no
English embedding has to be relearnt. Unlike CdLM*, the language embeddings stay: the TRILayer is told which
language to produce.

Order. ``order[b, i]`` is the input position whose lower-half output becomes output position i's TRILayer
input, or -1 for the placeholder. MLM uses the identity (order None); CdLM the target-to-source alignment.
From the TRILayer on, sequences have the output's shape, so the TRILayer and the upper half attend with the
output mask (the authors' code kept the source's: wrong whenever the two lengths differ).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xpt_ds.config.methods import method_of

try:  # transformers >= 4.53; older versions build the additive mask themselves (_mask)
    from transformers.masking_utils import create_bidirectional_mask
except ImportError:
    create_bidirectional_mask = None

ENGLISH, TARGET = 0, 1  # rows of trelm.language_embeddings, values of input_lang / output_lang


def has_trilayer(config) -> bool:
    """Whether a trelm model of this HF config has the TRILayer (``method: trelm``) or not (``trelm_no_tri``)."""
    method = method_of(config)
    return method is None or method.trilayer


def halves(model: nn.Module) -> int:
    """Index of the first upper-half layer (N // 2); the TRILayer runs before it."""
    n = len(_base(model).encoder.layer)
    if n < 2:
        raise ValueError(f"TreLM needs at least 2 encoder layers to split, the model has {n}")
    return n // 2


def _base(model: nn.Module) -> nn.Module:
    return getattr(model, model.base_model_prefix)


class _SourceDecoder(nn.Module):
    """The English decoder, ``F.linear`` as a module call. Its weight and bias belong to ``TreLMParts``
    (``source_word_embeddings.weight``, ``source_lm_bias``) and are registered as this module's external
    parameters: ZeRO-3 gathers a parameter only for the forward of a module that owns or registers it, and
    leaves it an empty shard anywhere else."""

    def forward(self, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, weight, bias)


class TreLMParts(nn.Module):
    """The parameters TreLM adds to a stock *ForMaskedLM (attached as its ``trelm`` submodule). Every parameter
    is read inside the forward of a module that owns or registers it (ZeRO-3: see ``_SourceDecoder``): the
    placeholder in this module's own forward (``reorder``), the English vocabulary in ``source_decoder``'s and
    ``source_word_embeddings``' own."""

    def __init__(self, model: nn.Module):
        super().__init__()
        import deepspeed  # register_external_parameter only sets an attribute: no ZeRO needed to call it
        cfg = model.config
        d = cfg.hidden_size
        if has_trilayer(cfg):  # a layer of the encoder's class, as the one it follows (whose values it starts from)
            follows = halves(model) - 1
            self.trilayer = type(_base(model).encoder.layer[follows])(cfg, layer_idx=follows)
            self.placeholder = nn.Parameter(torch.zeros(d))
        else:  # 004 Table 7's "w/o CdLM & w/o TRILayer": the halves run back to back, nothing to reorder
            self.trilayer = self.placeholder = None
        self.language_embeddings = nn.Embedding(2, d)
        self.source_word_embeddings = nn.Embedding(cfg.xpt_trelm_source_vocab_size, d,
                                                   padding_idx=cfg.xpt_trelm_source_pad_id)
        self.source_lm_bias = nn.Parameter(torch.zeros(cfg.xpt_trelm_source_vocab_size))
        self.source_decoder = _SourceDecoder()  # no parameters of its own: the state dict is unchanged
        for p in (self.source_word_embeddings.weight, self.source_lm_bias):
            deepspeed.zero.register_external_parameter(self.source_decoder, p)
        self.position_offset = cfg.xpt_position_offset  # RoBERTa: position i is row pad + 1 + i

    @torch.no_grad()
    def reset_xpt_parameters(self) -> None:
        """004 §3.2's initialisation of what TreLM adds and does not copy (``xpt_ds.model.values.stock_init`` calls it
        with one parameter real at a time): orthogonal language rows (the authors' code left one row uninitialised),
        a zero placeholder. The TRILayer and the English vocabulary are copied from the source
        (``xpt_ds.model.build``); drawn here only where the source lacks them (stock-like values)."""
        real = lambda p: p is not None and p.device.type != "meta"  # noqa: E731 - the one being drawn
        if real(self.language_embeddings.weight):
            nn.init.orthogonal_(self.language_embeddings.weight)
        if real(self.placeholder):
            nn.init.zeros_(self.placeholder)
        if real(self.source_lm_bias):
            nn.init.zeros_(self.source_lm_bias)
        if real(self.source_word_embeddings.weight):
            nn.init.normal_(self.source_word_embeddings.weight, std=0.02)

    def forward(self, hidden: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
        """[B, T, d] lower-half output, [B, T'] order -> [B, T', d]: position i takes ``hidden[order[i]]``, or the
        placeholder where ``order[i] < 0``."""
        picked = hidden.gather(1, order.clamp(min=0)[..., None].expand(-1, -1, hidden.shape[-1]))
        return torch.where((order < 0)[..., None], self.placeholder.to(hidden.dtype), picked)

    def reorder(self, hidden: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
        """``forward``, named for what it does; always through the module call (ZeRO-3 hooks)."""
        return self(hidden, order)


def add_trelm(model: nn.Module) -> None:
    """Attach ``trelm`` (its values come from the builder or a checkpoint). The config must carry
    ``xpt_trelm_source_vocab_size``, ``xpt_trelm_source_pad_id`` and ``xpt_position_offset``."""
    model.trelm = TreLMParts(model)


def trelm_tags(name: str) -> set[str]:
    """Tags beyond ``model._tag_parameters``' generic ones (which give ``@lower``/``@upper``: the layers below
    and above the TRILayer, ``model.layer_halves``): ``@trilayer``, ``@lang``, and the English vocabulary's
    ``@embeddings`` / ``@lm_head_bias``."""
    if name.startswith(("trelm.trilayer.", "trelm.placeholder")):
        return {"@trilayer"}
    return {"trelm.language_embeddings.weight": {"@lang"}, "trelm.source_word_embeddings.weight": {"@embeddings"},
            "trelm.source_lm_bias": {"@lm_head_bias"}}.get(name, set())


def _positions(parts: TreLMParts, length: int, device) -> torch.Tensor:
    return parts.position_offset + torch.arange(length, device=device)[None, :]  # [1, T]


def _mask(model: nn.Module, x: torch.Tensor, mask: torch.Tensor | None):
    """The attention implementation's form of a [B, T] padding mask (None: no padding)."""
    if mask is None:
        return None
    if create_bidirectional_mask is None:
        return model.get_extended_attention_mask(mask, mask.shape, dtype=x.dtype)  # additive [B, 1, 1, T]
    return create_bidirectional_mask(config=model.config, inputs_embeds=x, attention_mask=mask)


def _layer(layer: nn.Module, x: torch.Tensor, mask) -> torch.Tensor:
    out = layer(x, mask)
    return out[0] if isinstance(out, tuple) else out  # transformers 4.x layers return a tuple, 5.x a tensor


def encode(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
           input_lang: torch.Tensor | None = None, order: torch.Tensor | None = None,
           output_mask: torch.Tensor | None = None, output_lang: torch.Tensor | None = None) -> torch.Tensor:
    """004's unified forward: [B, T] input ids (S) -> [B, T', d] upper-half output in the output order.

    ``input_lang`` / ``output_lang``: [B] ENGLISH or TARGET per row (default TARGET). ``attention_mask``: [B, T]
    padding of the input (lower half). ``order``: [B, T'] (default the identity, T' = T). ``output_mask``: [B, T']
    padding of the output, used by the TRILayer and the upper half (default ``attention_mask``, only right for
    the identity order)."""
    base, parts = _base(model), model.trelm
    B, T = input_ids.shape
    target = torch.full((B,), TARGET, dtype=torch.long, device=input_ids.device)
    input_lang = target if input_lang is None else input_lang
    output_lang = target if output_lang is None else output_lang
    # Both tables are looked up for every row (ids clamped into each) and the row's language picks one: no
    # host sync to split the batch, and every parameter takes part in every forward pass (ZeRO).
    src, tgt = parts.source_word_embeddings, base.embeddings.word_embeddings
    words = torch.where((input_lang == ENGLISH)[:, None, None], src(input_ids.clamp(max=src.num_embeddings - 1)),
                        tgt(input_ids.clamp(max=tgt.num_embeddings - 1)))
    words = words + parts.language_embeddings(input_lang)[:, None, :]
    x = base.embeddings(inputs_embeds=words, position_ids=_positions(parts, T, input_ids.device).expand(B, -1))
    layers, half = base.encoder.layer, halves(model)
    mask = _mask(model, x, attention_mask)
    for layer in layers[:half]:
        x = _layer(layer, x, mask)
    if parts.trilayer is None:  # trelm_no_tri: the stock encoder plus language rows, output in the input's language
        if order is not None:  # MLM batches carry none (trelm_data.join); CdLM rows do, and the config refuses them
            raise ValueError("this trelm model has no TRILayer (method trelm_no_tri): it cannot reorder (CdLM)")
        for layer in layers[half:]:
            x = _layer(layer, x, mask)
        return x
    if order is not None:
        x = parts.reorder(x, order)
        mask = _mask(model, x, output_mask)
    elif output_mask is not None:
        mask = _mask(model, x, output_mask)
    positions = _positions(parts, x.shape[1], x.device)
    x = x + parts.language_embeddings(output_lang)[:, None, :] + base.embeddings.position_embeddings(positions)
    x = _layer(parts.trilayer, x, mask)
    for layer in layers[half:]:
        x = _layer(layer, x, mask)
    return x


def _transform(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head without its decoder (BERT's transform; RoBERTa's dense, gelu, layer_norm)."""
    if hasattr(model, "cls"):
        return model.cls.predictions.transform(hidden)
    head = model.lm_head
    return head.layer_norm(F.gelu(head.dense(hidden)))


def lm_logits(model: nn.Module, hidden: torch.Tensor, lang: int) -> torch.Tensor:
    """[M, d] -> [M, V] logits over the vocabulary of ``lang``: TARGET through the stock head, ENGLISH through the
    same transform with the decoder tied to the English word embeddings and the source's head bias."""
    if lang == TARGET:
        return (model.cls if hasattr(model, "cls") else model.lm_head)(hidden)
    parts = model.trelm
    return parts.source_decoder(_transform(model, hidden), parts.source_word_embeddings.weight, parts.source_lm_bias)
