"""TreLM's CdLM validation (data.parallel_valid_shards): every CdLM direction a phase of the run trains, scored at
each validation point beside the target MLM (``valid/cdlm_en_x/*``, ``valid/cdlm_x_en/*``: loss, ppl, hits@k, MRR
and MR over every predicted piece and sep, ``metrics.mlm.MLMStats``; the loss is the mean the CdLM training term
is).

One pass over the validation pairs in their epoch-0 order, the same fixed set every time: batch b of rank r holds
pairs b·Bp·world + r·Bp + j (j < Bp = data.parallel_micro_batch), and rows past the last pair are padding that
predicts nothing, so every rank runs the same number of batches of the same shape (ZeRO-3). It reads its own
pair corpus, draws no random numbers and runs in eval mode (no dropout): validation moves neither the training
data position nor any RNG, so a resume stays exact.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np
import torch

from xpt_ds.config import OBJECTIVES, ConfigError, TrainConfig
from xpt_ds.config.phase_checks import phase_objectives
from xpt_ds.data.parallel import PairCorpus, build_pair_corpus, cdlm_rows
from xpt_ds.data.tokenizer import TargetTokenizer
from xpt_ds.metrics.mlm import MLMStats, scored_batch
from xpt_ds.trelm.model import ENGLISH, TARGET
from xpt_ds.trelm.objective import BATCH_KEYS

_EMPTY = np.zeros(0, np.int64)


class CdlmValidation:
    """This rank's CdLM validation batches of each direction, and their scores."""

    def __init__(self, corpus: PairCorpus, objectives: list[str], pairs_per_batch: int, seq_len: int, rank: int,
                 world: int, source_tok: TargetTokenizer, tok: TargetTokenizer):
        self.corpus, self.objectives, self.B, self.L = corpus, objectives, pairs_per_batch, seq_len
        self.rank, self.world, self.source_tok, self.tok = rank, world, source_tok, tok

    def batches(self, objective: str) -> Iterator[dict[str, torch.Tensor]]:
        n = len(self.corpus)
        for first in range(0, n, self.B * self.world):
            ks = [k for k in range(first + self.rank * self.B, first + (self.rank + 1) * self.B) if k < n]
            pad = [(_EMPTY, _EMPTY, _EMPTY)] * (self.B - len(ks))
            if objective == "cdlm_en_x":
                pairs = [self.corpus.pair(k, "t2s") for k in ks] + pad
                rows, langs = cdlm_rows(pairs, self.L, self.source_tok, self.tok), (ENGLISH, TARGET)
            else:
                pairs = [(tgt, src, s2t) for src, tgt, s2t in (self.corpus.pair(k, "s2t") for k in ks)] + pad
                rows, langs = cdlm_rows(pairs, self.L, self.tok, self.source_tok), (TARGET, ENGLISH)
            keep = rows["positions"] < len(ks) * self.L  # the padding rows' sep is no prediction
            positions, targets = BATCH_KEYS[objective]
            yield {"input_ids": rows["input_ids"], "attention_mask": rows["attention_mask"], "order": rows["order"],
                   "output_mask": rows["output_mask"], "input_lang": torch.full((self.B,), langs[0]),
                   "output_lang": torch.full((self.B,), langs[1]), "mlm_positions": torch.from_numpy(_EMPTY),
                   "mlm_targets": torch.from_numpy(_EMPTY), positions: rows["positions"][keep],
                   targets: rows["targets"][keep]}

    def evaluate(self, logits_of: Callable[[dict[str, torch.Tensor], str], torch.Tensor], device: torch.device,
                 max_batches: int) -> dict[str, float]:
        """``logits_of(batch, objective)``: the model's [M, V] logits at that objective's positions (the
        trainer's engine, in eval mode). ``max_batches`` > 0 scores the first that many global batches of each
        direction (``scored_batch``), on any number of ranks."""
        out = {}
        for objective in self.objectives:
            stats = MLMStats(device)
            for b, batch in enumerate(self.batches(objective)):
                scored = scored_batch(b, max_batches, self.rank, self.world)
                if scored is None:
                    break
                logits = logits_of(batch, objective)
                if scored:
                    stats.update(logits, batch[BATCH_KEYS[objective][1]].to(device))
            stats.all_reduce()
            out.update({f"valid/{objective}/{k}": v for k, v in stats.result().items() if k != "tokens"})
        return out


def build_cdlm_validation(cfg: TrainConfig, source_tok: TargetTokenizer, tok: TargetTokenizer, rank: int,
                          world: int) -> CdlmValidation | None:
    """The pairs of data.parallel_valid_shards (checked as data.parallel_shards are), scored in each CdLM direction
    some phase trains; None without them."""
    if not cfg.data.parallel_valid_shards:
        return None
    valid = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, parallel_shards=cfg.data.parallel_valid_shards))
    try:
        corpus = build_pair_corpus(valid, tok, source_tok)
    except ConfigError as e:  # its checks name data.parallel_shards
        raise ConfigError(str(e).replace("'data.parallel_shards'", "'data.parallel_valid_shards'")) from None
    trained = {o for i in range(len(cfg.phases)) for o in phase_objectives(cfg, i)}
    objectives = [o for o in OBJECTIVES if o.startswith("cdlm") and o in trained]
    return CdlmValidation(corpus, objectives, cfg.data.parallel_micro_batch or cfg.optim.micro_batch_size,
                          cfg.data.seq_len, rank, world, source_tok, tok)
