"""What a TreLM micro-batch trains on, over all ranks: the tokens of every row (target MLM, English MLM and the
CdLM pairs of both directions at their real lengths) and their model FLOPs, for the trainer's tokens/s, tokens
seen, ETA and MFU.

Every rank's rows are known without communication: MLM rows are packed full sequences (data.seq_len tokens
each, as XPT counts them), and the CdLM rows of all ranks are the global pairs P .. P + Bp·world
(``xpt_ds.data.parallel``), whose lengths the shard index holds (``PairCorpus.lengths``). A CdLM row's tokens are
its real input (cls + pieces + sep, padding not counted); its FLOPs count the lower half on the input, the
TRILayer and the upper half on the real output, and the head on every predicted piece.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xpt_ds.metrics.logger import rows_flops
from xpt_ds.trelm.model import has_trilayer

ENGLISH_OUT = ("mlm_source", "cdlm_x_en")  # objectives predicted through the English head


@dataclass(frozen=True)
class RowGroup:
    """One objective's rows of a micro-batch, every rank's."""
    objective: str
    lengths_in: np.ndarray  # [rows] real input tokens
    lengths_out: np.ndarray  # [rows] real output tokens (MLM: the input's)
    predicted: float  # predicted positions (MLM: mask_prob of the tokens, as flops_per_token counts them)


def mlm_group(objective: str, rows: int, seq_len: int, mask_prob: float) -> RowGroup:
    full = np.full(rows, seq_len, np.int64)
    return RowGroup(objective, full, full, mask_prob * seq_len * rows)


def cdlm_group(objective: str, lengths: list[tuple[int, int]], seq_len: int) -> RowGroup:
    """``lengths``: (source pieces, target pieces) of each pair; a side is cut to seq_len - 2 as ``cdlm_rows``
    cuts it. en->X reads the source and predicts every target piece and sep; X->en the reverse."""
    src, tgt = (np.minimum(np.array(side, np.int64).reshape(-1), seq_len - 2) for side in zip(*lengths))
    inp, out = (src, tgt) if objective == "cdlm_en_x" else (tgt, src)
    return RowGroup(objective, inp + 2, out + 2, float((out + 1).sum()))


def micro_batch_work(hf_config, groups: list[RowGroup]) -> tuple[int, float]:
    """(tokens, model FLOPs) of one micro-batch's rows on every rank (``metrics.logger.rows_flops``)."""
    n = hf_config.num_hidden_layers
    # the lower half on the input; with the TRILayer, it and the upper half on the reordered output
    layers_in, layers_out = (n // 2, n - n // 2 + 1) if has_trilayer(hf_config) else (n, 0)
    vocab = {False: hf_config.vocab_size, True: hf_config.xpt_trelm_source_vocab_size}
    tokens, flops = 0, 0.0
    for g in groups:
        tokens += int(g.lengths_in.sum())
        flops += rows_flops(hf_config, g.lengths_in, g.lengths_out, layers_in, layers_out,
                            {vocab[g.objective in ENGLISH_OUT]: g.predicted})
    return tokens, flops
