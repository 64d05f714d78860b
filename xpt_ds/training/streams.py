"""The run's batch streams as one component: the training stream (TreLM: the phase's other objectives beside MLM; with
data.mix, a blend of corpora), validation, each data.mix corpus's validation, and TreLM's CdLM validation. It owns
their worker processes; its state, where the training stream is, is checkpointed as ``data``."""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from xpt_ds.config import TrainConfig
from xpt_ds.config.phase_checks import mix_weights, phase_objectives
from xpt_ds.data import scan_records
from xpt_ds.data.mixture import MAIN
from xpt_ds.data.mlm import build_mix_validation, build_streams
from xpt_ds.errors import UserError
from xpt_ds.training.guards import check_streams_agree, shard_layouts, skipped_shards
from xpt_ds.trelm.data import TreLMBatchStream, build_trelm_stream
from xpt_ds.trelm.valid import build_cdlm_validation
from xpt_ds.trelm.work import micro_batch_work

log = logging.getLogger(__name__)


class Streams:
    def __init__(self, train, valid, cdlm_valid, mix_valid: dict | None = None):
        self.train, self.valid, self.cdlm_valid = train, valid, cdlm_valid
        self.mix_valid = mix_valid or {}  # data.mix corpus name -> its validation stream
        self.rows: list = []  # TreLM's row groups of the micro-batches since the last step_work

    @property
    def mlm(self):
        """The target MLM (or next-token) stream: the training stream, or the one inside TreLM's."""
        return self.train.mlm if self.trelm else self.train

    def target_rows(self) -> int:
        """Rows of data.train_shards trained on so far (with data.mix, not the other corpora's)."""
        return self.mlm.positions()[MAIN]

    def mixed_epochs(self) -> dict[str, int]:
        return self.mlm.mixed_epochs()

    @property
    def trelm(self) -> bool:
        return isinstance(self.train, TreLMBatchStream)

    def use_phase(self, cfg: TrainConfig, index: int) -> None:
        """TreLM's stream builds the phase's objectives' rows; a plain MLM stream has target MLM only. With
        data.mix, the phase's weights (``phases[i].mix``) blend the corpora from here on."""
        if self.trelm:
            self.train.use(phase_objectives(cfg, index))
        if self.mlm.mixture is not None:
            self.mlm.reweight(mix_weights(cfg, index))

    def next_batch(self) -> dict[str, torch.Tensor]:
        """The next micro-batch; TreLM's rows in it are counted for ``step_work``."""
        batch = next(self.train)
        if self.trelm:
            self.rows += self.train.last_rows
        return batch

    def step_work(self, hf_config) -> tuple[int, float] | None:
        """(tokens, FLOPs) of every rank's micro-batches since the last call where they vary by step (TreLM's
        pairs at their real lengths: ``xpt_ds.trelm.work``); None where each step's are the build's count."""
        rows, self.rows = self.rows, []
        return micro_batch_work(hf_config, rows) if rows else None

    def state_dict(self) -> dict:
        return self.train.state_dict()

    def load_state_dict(self, sd: dict) -> None:
        self.train.load_state_dict(sd)

    @property
    def epoch(self) -> int:
        return self.train.epoch

    def skipped_shards(self) -> list[str]:
        return skipped_shards(self.train)

    def fork_workers(self) -> None:
        """Before any engine thread exists (``xpt_ds.data.workers``)."""
        for stream in filter(None, (self.train, self.valid, *self.mix_valid.values())):
            stream.fork_workers()

    def close(self) -> None:
        """Stop the loaders' worker processes (they ignore stop signals)."""
        for stream in filter(None, (self.train, self.valid, *self.mix_valid.values())):
            stream.close()


def open_streams(cfg: TrainConfig, tok, hf_config, rank: int, world: int, causal: bool) -> Streams:
    """Every rank's streams; a problem on one rank stops them all (``check_streams_agree``), not it alone."""
    records = scan_records.run_records(Path(cfg.run_dir), cfg.data.reuse_scans)
    try:
        with scan_records.kept(records):
            train, valid = build_streams(cfg.data, tok, cfg.optim.micro_batch_size, rank, world, causal=causal)
            mixed = build_mix_validation(cfg.data, train)
            if cfg.data.parallel_shards or cfg.data.source_shards:  # TreLM: the phase's other objectives join MLM
                train = build_trelm_stream(train, cfg, tok, hf_config.xpt_trelm_source_vocab_size, rank, world)
            cdlm = None if not isinstance(train, TreLMBatchStream) else build_cdlm_validation(
                cfg, train.source_tok, tok, rank, world)  # data.parallel_valid_shards
        streams, problem = Streams(train, valid, cdlm, mixed), None
        if records is not None and rank == 0:
            log.info(records.summary())
    except (UserError, OSError) as e:
        streams, problem = None, e
    check_streams_agree(problem, [] if problem else streams.skipped_shards(),
                        {} if problem else shard_layouts(streams.train, streams.valid, *streams.mix_valid.values()))
    if records is not None:
        prune_scans(records, rank, world)
    return streams


def prune_scans(records: scan_records.Records, rank: int, world: int) -> None:
    """Once every rank's scans are done (``check_streams_agree`` passed): rank 0 removes the records that no node
    used at this start (``scan_records.prune``), so records of files that changed do not pile up. Each node's local
    rank 0 scanned or read every shard its node reads, so its names (16 bytes a shard) stand for its node's."""
    mine = b"".join(bytes.fromhex(Path(name).stem) for name in sorted(records.used)) if records.share[0] == 0 else b""
    every = [mine]
    if world > 1 and torch.distributed.is_initialized():
        every = [b""] * world
        torch.distributed.all_gather_object(every, mine)
    if rank != 0:
        return
    keep = {f"{blob[i:i + 16].hex()}.npz" for blob in every for i in range(0, len(blob), 16)}
    gone = scan_records.prune(records.directory, keep)
    if gone:
        log.info("shard scans: %d records that no rank used at this start removed from %s", gone, records.directory)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "seq_ids"}
