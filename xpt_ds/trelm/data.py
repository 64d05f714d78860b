"""TreLM's training micro-batches (004 §3.2): the rows of the current phase's objectives
(``phase_checks.phase_objectives``) joined into one unified batch for ``xpt_ds.trelm.objective``.

A micro-batch holds, in this order: the target MLM sequences of data.train_shards (every phase), the English MLM
sequences of data.source_shards (``mlm_source``), and CdLM rows English -> target (``cdlm_en_x``) and target ->
English (``cdlm_x_en``) made from the same data.parallel_micro_batch pairs (``xpt_ds.data.parallel``). Each group
of rows has its input and output language: English MLM reads and predicts English (the English word embeddings,
language row ``ENGLISH`` before the TRILayer, the English head), en->X reads English and predicts the target,
X->en the reverse.

After each micro-batch ``last_rows`` describes every rank's rows of it (``xpt_ds.trelm.work``: tokens and FLOPs
for the throughput figures).

The stream's state is the position of every sub-stream the config has, whether the current phase reads it or not:
``sequences`` (target MLM), ``pairs`` (with data.parallel_shards), ``source_sequences`` (with data.source_shards).
All three are global counts, so a checkpoint resumes on any number of ranks (as ``MLMBatchStream``'s), and a phase
end's state restores all of them at a ``start_from`` rewind: both transfer branches read the same pairs and
target sequences (004 Alg. 1 samples both models' batches from the one set P).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from xpt_ds.config import OBJECTIVE_DATA, OBJECTIVES, ConfigError, TrainConfig
from xpt_ds.data.mlm import MLMBatchStream, build_source_stream
from xpt_ds.data.parallel import PairCorpus, build_pair_corpus, cdlm_rows
from xpt_ds.data.tokenizer import TargetTokenizer, build_hf_tokenizer
from xpt_ds.trelm.model import ENGLISH, TARGET
from xpt_ds.trelm.objective import BATCH_KEYS
from xpt_ds.trelm.work import RowGroup, cdlm_group, mlm_group


@dataclass
class Rows:
    """One objective's rows of a micro-batch: [B, L] tensors, positions flat in [B*L]."""
    objective: str
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    order: torch.Tensor
    output_mask: torch.Tensor
    input_lang: int
    output_lang: int
    positions: torch.Tensor
    targets: torch.Tensor


def mlm_rows(objective: str, batch: dict[str, torch.Tensor], lang: int) -> Rows:
    """An MLM batch (``MLMBatchStream``) as rows of ``lang`` in and out, in the identity order."""
    ids = batch["input_ids"]
    B, L = ids.shape
    mask = batch["attention_mask"] if "attention_mask" in batch else torch.ones_like(ids)
    return Rows(objective, ids, mask, torch.arange(L).expand(B, L), mask, lang, lang, batch["mlm_positions"],
                batch["mlm_targets"])


def pair_rows(objective: str, rows: dict[str, torch.Tensor], input_lang: int, output_lang: int) -> Rows:
    """``parallel_data.cdlm_rows`` as rows of one CdLM direction."""
    return Rows(objective, rows["input_ids"], rows["attention_mask"], rows["order"], rows["output_mask"], input_lang,
                output_lang, rows["positions"], rows["targets"])


def join(groups: list[Rows], seq_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """One unified batch: the groups' rows stacked in order, each group's positions shifted past the rows before
    it. ``order`` and ``output_mask`` only when some row reorders (CdLM; without them every row keeps its input
    order and mask: no gather on the model side), ``output_lang`` only when some row predicts English (without it
    every output is the target)."""
    L = groups[0].input_ids.shape[1]
    counts = [g.input_ids.shape[0] for g in groups]
    out = {"input_ids": torch.cat([g.input_ids for g in groups]),
           "attention_mask": torch.cat([g.attention_mask for g in groups]),
           "input_lang": torch.tensor([g.input_lang for g, n in zip(groups, counts) for _ in range(n)])}
    if any(g.objective.startswith("cdlm") for g in groups):
        out["order"] = torch.cat([g.order for g in groups])
        out["output_mask"] = torch.cat([g.output_mask for g in groups])
    if any(g.output_lang == ENGLISH for g in groups):
        out["output_lang"] = torch.tensor([g.output_lang for g, n in zip(groups, counts) for _ in range(n)])
    before = 0
    for g, n in zip(groups, counts):
        positions, targets = BATCH_KEYS[g.objective]
        out[positions], out[targets] = (g.positions + before * L if before else g.positions), g.targets
        before += n
    out["seq_ids"] = seq_ids
    return out


class TreLMBatchStream:
    """This rank's training micro-batches for method trelm: each target MLM batch of ``mlm`` joined by the rows of
    the other objectives the current phase trains on (``use``; the trainer calls it at every phase start). Looks
    like an MLMBatchStream to the trainer (state_dict, epoch, stream, fork_workers, close)."""

    def __init__(self, mlm: MLMBatchStream, source: MLMBatchStream | None, corpus: PairCorpus | None,
                 pairs_per_batch: int, rank: int, world: int, source_tok: TargetTokenizer, tok: TargetTokenizer):
        self.mlm, self.source, self.corpus = mlm, source, corpus
        self.B, self.rank, self.world = pairs_per_batch, rank, world
        self.source_tok, self.tok = source_tok, tok
        self.pairs = 0  # global pairs consumed
        self.objectives = ("mlm_target",) + (("cdlm_en_x",) if corpus is not None else ())  # phase_objectives' default
        self.last_rows: list[RowGroup] = []  # every rank's rows of the last micro-batch (xpt_ds.trelm.work)

    def use(self, objectives: list[str]) -> None:
        """Train on ``objectives`` from the next micro-batch on (validated against the data in config.validate)."""
        for name in objectives:
            if (name == "mlm_source" and self.source is None) or (name.startswith("cdlm") and self.corpus is None):
                raise ConfigError(f"config key 'data.{OBJECTIVE_DATA[name]}' is empty but objective '{name}' reads it")
        self.objectives = tuple(name for name in OBJECTIVES if name in objectives)  # the batch's fixed row order

    @property
    def stream(self):
        return self.mlm.stream

    @property
    def epoch(self) -> int:
        return self.mlm.epoch

    def state_dict(self) -> dict:
        state = self.mlm.state_dict()
        if self.corpus is not None:
            state["pairs"] = self.pairs
        if self.source is not None:
            state["source_sequences"] = self.source.sequences
        return state

    def load_state_dict(self, sd: dict) -> None:
        """A key a checkpoint lacks (written by a run without that data) counts from 0."""
        self.mlm.load_state_dict(sd)
        self.pairs = int(sd.get("pairs", 0))
        if self.source is not None:
            self.source.load_state_dict({"sequences": int(sd.get("source_sequences", 0)),
                                         **({"seq_len": sd["seq_len"]} if "seq_len" in sd else {})})

    def fork_workers(self) -> None:
        self.mlm.fork_workers()
        if self.source is not None:
            self.source.fork_workers()

    def close(self) -> None:
        self.mlm.close()
        if self.source is not None:
            self.source.close()

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        batch = next(self.mlm)
        L, mask_prob, every_rank = self.mlm.stream.cfg.seq_len, self.mlm.stream.cfg.mask_prob, self.B * self.world
        groups = [mlm_rows("mlm_target", batch, TARGET)]
        self.last_rows = [mlm_group("mlm_target", self.mlm.micro_batch * self.world, L, mask_prob)]
        if "mlm_source" in self.objectives:
            groups.append(mlm_rows("mlm_source", next(self.source), ENGLISH))
            self.last_rows.append(mlm_group("mlm_source", self.source.micro_batch * self.world, L, mask_prob))
        if {"cdlm_en_x", "cdlm_x_en"} & set(self.objectives):
            first = self.pairs + self.rank * self.B
            ks = range(first, first + self.B)
            lengths = [self.corpus.lengths(k) for k in range(self.pairs, self.pairs + every_rank)]
            self.pairs += every_rank
            if "cdlm_en_x" in self.objectives:
                pairs = [self.corpus.pair(k, "t2s") for k in ks]
                groups.append(pair_rows("cdlm_en_x", cdlm_rows(pairs, L, self.source_tok, self.tok), ENGLISH, TARGET))
                self.last_rows.append(cdlm_group("cdlm_en_x", lengths, L))
            if "cdlm_x_en" in self.objectives:
                pairs = [(tgt, src, s2t) for src, tgt, s2t in (self.corpus.pair(k, "s2t") for k in ks)]
                groups.append(pair_rows("cdlm_x_en", cdlm_rows(pairs, L, self.tok, self.source_tok), TARGET, ENGLISH))
                self.last_rows.append(cdlm_group("cdlm_x_en", lengths, L))
        if len(groups) == 1:  # target MLM only: the plain batch (no order, no mask: SDPA's fast path)
            return batch
        return join(groups, batch["seq_ids"])


def build_trelm_stream(mlm: MLMBatchStream, cfg: TrainConfig, tok: TargetTokenizer, source_vocab: int, rank: int,
                       world: int) -> TreLMBatchStream:
    """``mlm`` joined by English MLM (data.source_shards) and CdLM pairs (data.parallel_shards) as each phase asks;
    English ids are those of model.source's tokenizer, which must fit the model's ``source_vocab`` English
    embedding rows."""
    source_tok = build_hf_tokenizer(cfg.model.source, "config key 'model.source'")
    if source_tok.vocab_size > source_vocab:
        raise ConfigError(f"config key 'model.source': its tokenizer has {source_tok.vocab_size} entries but the "
                          f"model only {source_vocab} word embeddings")
    micro = cfg.optim.micro_batch_size
    source = build_source_stream(cfg.data, source_tok, micro, rank, world) if cfg.data.source_shards else None
    corpus = build_pair_corpus(cfg, tok, source_tok) if cfg.data.parallel_shards else None
    return TreLMBatchStream(mlm, source, corpus, cfg.data.parallel_micro_batch or micro, rank, world, source_tok,
                            tok)
