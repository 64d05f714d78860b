"""``method: extend``: the source's vocabulary kept, the target's pieces appended (Chinese-LLaMA, EEVE, SambaLingo),
and the rows split so that the old ones can be frozen exactly.

The tokenizer comes from ``xpt-data extend-vocab`` (``data_tools.cli.extend_vocab``): ids ``0 .. source_size - 1`` are
the source's, the new pieces follow. For training, the input embedding matrix (and an untied head's) is two
parameters, ``old_rows`` (the source's first ``source_size`` rows, copied) and ``new_rows`` (from
``model.embedding_init``), so a phase can train one and freeze the other with the machinery every parameter has: a
frozen parameter has ``requires_grad=False``, no optimizer state and no weight decay under any ZeRO stage, and is
checked bitwise at every save (``xpt_ds.checkpoint.frozen``). Tools that freeze rows of one matrix instead zero
their gradient, which leaves Adam's state and weight decay moving them (axolotl's ``unfrozen_parameters``), or
have ZeRO-3 gaps (peft's ``trainable_token_indices``).

A tied source (SmolLM2, Gemma, small Llama 3 and Qwen) keeps its head tied: the head module holds the same two
parameters, so ``@new_head_rows`` and ``@new_rows`` are one set there. The export concatenates the parts into the
stock ``embed_tokens.weight`` / ``lm_head.weight`` (``stock_value``), so it is a plain ``*ForCausalLM``.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from xpt_ds.config import ConfigError

CONFIG_KEY = "xpt_extend_rows"  # in the target's HF config: the source rows the tokenizer kept (the old ones)
REPORT = "extend_vocab.json"  # what xpt-data extend-vocab writes beside the tokenizer
OLD, NEW = "old_rows", "new_rows"


def _parts(weight: nn.Parameter, rows: int, width: int, old: int) -> tuple[nn.Parameter, nn.Parameter]:
    """Two unset parameters of ``weight``'s dtype: rows ``0 .. old - 1`` and ``old .. rows - 1``."""
    return tuple(nn.Parameter(torch.empty(n, width, dtype=weight.dtype), requires_grad=weight.requires_grad)
                 for n in (old, rows - old))


class SplitEmbedding(nn.Module):
    """An ``nn.Embedding`` of ``old_rows`` then ``new_rows``: each id reads its row from the part that holds it.
    Two lookups and a select, not a concatenated matrix: at 128K x 4096 a concatenation copies 1 GB a step."""

    def __init__(self, stock: nn.Embedding, old: int):
        super().__init__()
        # sizes from the module, not the weight: inside deepspeed.zero.Init the weight is already a partition
        self.old = old
        self.old_rows, self.new_rows = _parts(stock.weight, stock.num_embeddings, stock.embedding_dim, old)
        self.padding_idx = stock.padding_idx
        scale = getattr(stock, "embed_scale", None)  # Gemma2's and Gemma3's scaled embeddings multiply in forward
        if scale is not None:
            self.register_buffer("embed_scale", scale.detach().clone(), persistent=False)

    @property
    def num_embeddings(self) -> int:
        return self.old + self.new_rows.shape[0]

    def _padding(self, new: bool) -> int | None:
        if self.padding_idx is None:
            return None
        idx = self.padding_idx - (self.old if new else 0)
        return idx if 0 <= idx < (self.new_rows.shape[0] if new else self.old) else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        is_new = ids >= self.old
        old = F.embedding(ids.clamp(max=self.old - 1), self.old_rows, self._padding(False))
        new = F.embedding((ids - self.old).clamp(min=0), self.new_rows, self._padding(True))
        out = torch.where(is_new.unsqueeze(-1), new, old)
        scale = getattr(self, "embed_scale", None)
        return out if scale is None else out * scale.to(out.dtype)


class SplitHead(nn.Module):
    """The LM head over ``old_rows`` then ``new_rows``: logits of the old pieces, then of the new ones."""

    def __init__(self, old_rows: nn.Parameter, new_rows: nn.Parameter):
        super().__init__()
        self.old_rows, self.new_rows = old_rows, new_rows  # a tied head: the embedding's own parameters

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.cat([F.linear(hidden, self.old_rows), F.linear(hidden, self.new_rows)], dim=-1)


def split_rows(model: nn.Module, old: int) -> None:
    """Replace the input embedding (and the head, tied or not) of a stock *ForCausalLM by their split forms. Called
    where the skeleton is built (on meta, or inside ``deepspeed.zero.Init`` so the parts are partitioned)."""
    stock_in, stock_out = model.get_input_embeddings(), model.get_output_embeddings()
    tied = stock_out is not None and stock_out.weight is stock_in.weight
    embedding = SplitEmbedding(stock_in, old)
    model.set_input_embeddings(embedding)
    if tied:
        head = SplitHead(embedding.old_rows, embedding.new_rows)
    else:
        head = SplitHead(*_parts(stock_out.weight, stock_out.out_features, stock_out.in_features, old))
    model.set_output_embeddings(head)
    model._tied_weights_keys = {}  # nothing left for transformers' tie_weights to tie: the head holds the parts
    model.all_tied_weights_keys = {}


def extended_rows(tcfg) -> int:
    """The old rows of an extend target (0 for any other model)."""
    return int(getattr(tcfg, CONFIG_KEY, 0) or 0)


def stock_names(model: nn.Module) -> dict[str, tuple[str, str]]:
    """Stock parameter name -> (its old-rows name, its new-rows name) in the split model ``model``: the input
    embedding's weight and, for an untied head, ``lm_head.weight`` (a tied head's parts are the embedding's)."""
    names = {id(p): n for n, p in model.named_parameters()}
    out: dict[str, tuple[str, str]] = {}
    for split in (model.get_input_embeddings(), model.get_output_embeddings()):
        old = names[id(split.old_rows)]
        out.setdefault(old.removesuffix("." + OLD) + ".weight", (old, names[id(split.new_rows)]))
    return out


def stock_value(pair: tuple[str, str], values) -> torch.Tensor:
    """The stock matrix: the old rows, then the new."""
    return torch.cat([values(pair[0]), values(pair[1])])


def source_rows(tokenizer_path: str, tok_vocab: int, src_cfg, source: str) -> int:
    """How many of the source's rows the extended tokenizer at ``tokenizer_path`` keeps (its ``source_size``), from
    the report ``xpt-data extend-vocab`` writes beside it; one line if it is not such a tokenizer or not this
    source's."""
    report = Path(tokenizer_path) / REPORT
    if not report.is_file():
        raise ConfigError(f"config key 'model.tokenizer': {tokenizer_path} has no {REPORT}; method extend takes the "
                          "tokenizer `xpt-data extend-vocab --source SOURCE` writes (the source's pieces, then the "
                          "target's)")
    try:
        size = int(json.loads(report.read_text(encoding="utf-8"))["source_size"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"config key 'model.tokenizer': {report} is unreadable ({e!r})") from None
    if not 0 < size < tok_vocab:
        raise ConfigError(f"config key 'model.tokenizer': {report} says the source had {size} pieces, but the "
                          f"tokenizer has {tok_vocab}: it adds nothing")
    if size > src_cfg.vocab_size:
        raise ConfigError(f"config key 'model.tokenizer': {tokenizer_path} was extended from a tokenizer of {size} "
                          f"pieces, but model.source {source} has {src_cfg.vocab_size} embedding rows: it is not "
                          "this source's")
    return size
