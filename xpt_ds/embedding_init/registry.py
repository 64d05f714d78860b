"""Where the new target word embeddings start: the strategy interface, its report and the registry.

A strategy (``model.embedding_init``, options in ``model.embedding_init_args``) is a function
``fn(ctx: InitContext, rows: Rows) -> None`` that fills ``rows`` (the [target_vocab, hidden] matrix being built,
and what each row came from). ``InitContext`` offers, loaded only when a strategy asks for them: the target
SentencePiece pieces and their counts in ``data.train_shards``, the source model's input-embedding matrix and
its Hugging Face tokenizer (from ``model.source``, offline), and a ``torch.Generator`` seeded with
``model.init_seed`` and the parameter's name (``xpt_ds.model.values.stock_init.param_seed``). Strategies compute on the
CPU in float32/float64, walk ids in order and draw only from that generator, so every rank and every rerun gets
the same matrix bit for bit (``xpt_ds.training.fill`` checks).

Every strategy leaves the pad row zero. The report (``Rows.report``) counts rows by kind (``copied``,
``special``, ``combined``, ``fallback``, ``random``, ``zero``) with a few examples each; the trainer logs it,
writes ``RUN_DIR/embedding_init.json`` and puts it into every checkpoint's client state.

The strategies are in ``xpt_ds/embedding_init/strategies.py`` (``subword_mean`` in ``subword_mean.py``); the files
they read (made by ``data_tools``) are read and checked by ``xpt_ds/embedding_init/files.py``.
"""
from __future__ import annotations

import torch

from xpt_ds.config.embedding_args import EMBEDDING_INITS, check_args
from xpt_ds.embedding_init import strategies as s
from xpt_ds.embedding_init.context import InitContext, Rows
from xpt_ds.embedding_init.subword_mean import init_subword_mean

# name -> fn(ctx, rows); the options each takes, their defaults and a line of help are config's (embedding_args).
STRATEGIES = {
    "random": s.init_random,
    "source_mean": s.init_source_mean,
    "frequency_rank": s.init_frequency_rank,
    "overlap_copy": s.init_overlap_copy,
    "focus": s.init_focus,
    "aligned": s.init_aligned,
    "from_file": s.init_from_file,
    "subword_mean": init_subword_mean,
}
assert STRATEGIES.keys() == EMBEDDING_INITS.keys()


def init_embeddings(name: str, args: dict, ctx: InitContext, kept_rows: int = 0) -> tuple[torch.Tensor, dict]:
    """(float32 [target vocab, hidden], report) for strategy ``name``. ``kept_rows`` (method extend): rows
    0..kept_rows-1 stay the source's, so the report counts the rows after them only (``Rows.report``)."""
    args = check_args(name, args)
    ctx.args = args
    rows = Rows(ctx)
    STRATEGIES[name](ctx, rows)
    rows.matrix[ctx.tok.pad_id] = 0.0
    left = rows.unset()
    assert not left, f"embedding_init {name} left rows {left[:5]} unset"
    return rows.matrix, rows.report(name, args, kept_rows)
