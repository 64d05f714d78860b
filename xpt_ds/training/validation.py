"""Validation during training: 002 Table 2's metrics over the (seeded, hence fixed) validation masks, the same for
each ``data.mix`` corpus with validation shards (``valid/NAME/*``), and with TreLM's ``data.parallel_valid_shards``
each CdLM direction's (``xpt_ds.trelm.valid``). ``xpt_ds.cli.evaluate`` runs the same
computation on a checkpoint or an export."""
from __future__ import annotations

import torch

from xpt_ds.config import TrainConfig
from xpt_ds.metrics.mlm import MLMStats, piece_byte_lengths, piece_char_lengths, piece_word_starts, scored_batch
from xpt_ds.training.streams import Streams, to_device


class Validator:
    def __init__(self, cfg: TrainConfig, streams: Streams, tok, rank: int, world: int, device: torch.device):
        self.streams, self.rank, self.world, self.device = streams, rank, world, device
        self.every, self.batches = cfg.logging.eval_every, cfg.logging.eval_batches
        self.char_lengths = piece_char_lengths(tok)  # valid/bits_per_char: compares across vocabularies
        self.word_starts = piece_word_starts(tok)  # valid/bits_per_word: so does this
        self.byte_lengths = piece_byte_lengths(tok)  # valid/bits_per_byte: and this

    def due(self, step: int, phase_done: bool) -> bool:
        has_data = self.streams.valid is not None or self.streams.cdlm_valid is not None or bool(self.streams.mix_valid)
        return has_data and (phase_done or bool(self.every and step % self.every == 0))

    @torch.no_grad()
    def run(self, engine) -> dict[str, float]:
        engine.eval()
        metrics = {}
        for name, valid in [("", self.streams.valid), *self.streams.mix_valid.items()]:
            if valid is not None:
                metrics.update({f"valid/{name + '/' if name else ''}{k}": v for k, v in self._score(engine, valid)})
        if self.streams.cdlm_valid is not None:
            metrics.update(self.streams.cdlm_valid.evaluate(
                lambda batch, objective: engine(**to_device(batch, self.device), return_logits=True,
                                                logits_for=objective), self.device, self.batches))
        engine.train()
        return metrics

    def _score(self, engine, valid) -> list[tuple[str, float]]:
        """(metric, value) of one validation stream's pass."""
        valid.load_state_dict({"sequences": 0})
        stats = MLMStats(self.device, self.char_lengths, self.word_starts, self.byte_lengths)
        for i, batch in enumerate(valid):
            scored = scored_batch(i, self.batches, self.rank, self.world)
            if scored is None:
                break
            # the first eval_batches global micro-batches, on any number of ranks, are scored (a decoder's logits in
            # parts, never [M, V] for the micro-batch: xpt_ds.model.forward.causal_lm); the others run the same forward
            engine(**to_device(batch, self.device), score=stats.update if scored else _ignore)
        stats.all_reduce()
        return [(k, v) for k, v in stats.result().items() if k not in ("tokens", "chars", "words", "bytes")]

    @staticmethod
    def lines(step: int, metrics: dict[str, float]) -> list[str]:
        """What the log says of a validation."""
        out = []
        if "valid/loss" in metrics:
            out.append(f"step {step}: valid loss {metrics['valid/loss']:.4f} ppl {metrics['valid/ppl']:.2f} "
                       f"hits@1 {metrics['valid/hits@1']:.3f} mrr {metrics['valid/mrr']:.3f}")
        cdlm = [f"{k.split('/')[1]} {v:.4f}" for k, v in metrics.items() if k.startswith("valid/cdlm") and
                k.endswith("/loss")]
        if cdlm:
            out.append(f"step {step}: valid CdLM loss {', '.join(cdlm)}")
        mixed = [f"{k.split('/')[1]} {v:.4f}" for k, v in metrics.items() if k.count("/") == 2 and
                 k.endswith("/loss") and not k.startswith("valid/cdlm")]
        if mixed:
            out.append(f"step {step}: valid loss of the data.mix corpora: {', '.join(mixed)}")
        return out


def _ignore(logits: torch.Tensor, targets: torch.Tensor) -> None:
    """A forward that ZeRO-3's collectives need on a rank with no micro-batch left to score."""
