"""Stream WebDataset shards of token ids (docs/shard_format.md) into packed, dynamically masked MLM batches.

Every rank reads the same deterministic stream of packed sequences and keeps its own slice of each
global micro-batch, so the position in the data is a single integer (global micro-batches consumed)
that is the same on every rank and survives a resume. Masking is drawn from a generator seeded by
(seed, micro-batch index, rank): no RNG state to save.
"""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import braceexpand
import numpy as np
import torch

from xpt_ds.config import ConfigError, DataConfig
from xpt_ds.tokenizer import TargetTokenizer

FORMAT_VERSION = 1


class DataError(ValueError):
    """Unusable training data (corrupt shard, ids outside the vocabulary); the message names the shard."""


def _check_manifest_tokenizer(manifest: Path, meta: dict, tok: TargetTokenizer) -> None:
    if meta.get("vocab_size") != tok.vocab_size:
        raise ConfigError(f"manifest {manifest} has vocab_size {meta.get('vocab_size')} but model.tokenizer "
                          f"{tok.path} has {tok.vocab_size}: the shards were made with another tokenizer")
    sha = hashlib.sha256(Path(tok.path).read_bytes()).hexdigest()
    if meta.get("tokenizer_sha256") not in (None, sha):
        raise ConfigError(f"manifest {manifest} was tokenized with a different SentencePiece model than "
                          f"model.tokenizer {tok.path} (sha256 {meta['tokenizer_sha256'][:12]}… vs {sha[:12]}…)")


def expand_shards(specs: list[str], tok: TargetTokenizer | None = None) -> list[str]:
    """Paths, brace patterns (``train-{000000..000003}.tar``) or ``manifest.json:split``.

    With ``tok``, a manifest must record the same tokenizer (vocab size and sha256)."""
    out = []
    for spec in specs:
        path, _, split = spec.partition(".json:")
        if split:
            manifest = Path(path + ".json")
            if not manifest.is_file():
                raise ConfigError(f"manifest not found: {manifest}")
            meta = json.loads(manifest.read_text())
            if meta.get("format_version") != FORMAT_VERSION:
                raise ConfigError(f"manifest {manifest} has format_version {meta.get('format_version')}, "
                                  f"expected {FORMAT_VERSION}")
            if tok is not None:
                _check_manifest_tokenizer(manifest, meta, tok)
            if split not in meta["splits"]:
                raise ConfigError(f"manifest {manifest} has no split '{split}' (has {', '.join(meta['splits'])})")
            out += [str(manifest.parent / s) for s in meta["splits"][split]["shards"]]
        else:
            out += list(braceexpand.braceexpand(spec))
    for s in out:
        if not Path(s).is_file():
            raise ConfigError(f"shard not found: {s}")
    return out


def read_documents(shard: str) -> Iterator[np.ndarray]:
    """Token-id arrays of one shard, in file order; a corrupt or truncated shard raises naming the shard."""
    try:
        with tarfile.open(shard, "r:") as tar:
            for member in tar:
                if not member.isfile() or not member.name.endswith(".ids.npy"):
                    continue
                data = tar.extractfile(member).read()
                if len(data) != member.size:
                    raise ValueError(f"{member.name} is truncated ({len(data)} of {member.size} bytes)")
                arr = np.load(io.BytesIO(data), allow_pickle=False)
                if arr.ndim != 1 or arr.dtype not in (np.uint16, np.uint32):
                    raise ValueError(f"{member.name} has dtype {arr.dtype} shape {arr.shape}, expected 1-D uint16/32")
                yield arr
            # tarfile takes an EOF at a header boundary for the end of the archive: require the real
            # end-of-archive marker (two zero blocks) so a shard cut short is never read silently.
            tar.fileobj.seek(tar.offset)
            if tar.fileobj.read(1024) != bytes(1024):
                raise ValueError("truncated: no end-of-archive marker")
    except (tarfile.TarError, ValueError, EOFError, OSError) as e:
        raise DataError(f"corrupt shard {shard}: {e}") from None


def packed_sequences(shards: list[str], seq_len: int, tok: TargetTokenizer, seed: int, epoch: int) -> Iterator[np.ndarray]:
    """RoBERTa full-sentences packing: cls + (doc sep doc sep ...)[: seq_len-2] + sep, remainder carried over."""
    order = np.random.default_rng([seed, epoch]).permutation(len(shards))
    body = seq_len - 2
    buf = np.empty(0, dtype=np.int64)
    for i in order:
        for doc in read_documents(shards[i]):
            if len(doc) and doc.max() >= tok.vocab_size:
                raise DataError(f"shard {shards[i]} holds token id {doc.max()} >= vocab size {tok.vocab_size} of "
                                f"{tok.path}: it was made with another tokenizer")
            buf = np.concatenate([buf, doc.astype(np.int64), [tok.sep_id]])
            while len(buf) >= body:
                yield np.concatenate([[tok.cls_id], buf[:body], [tok.sep_id]])
                buf = buf[body:]


class MLMMasker:
    """Vectorised 80/10/10 masking that never masks or produces special tokens."""

    def __init__(self, cfg: DataConfig, tok: TargetTokenizer):
        self.cfg, self.tok = cfg, tok
        special = torch.tensor(tok.special_ids)
        self.special = special
        keep = torch.ones(tok.vocab_size, dtype=torch.bool)
        keep[special] = False
        self.normal_ids = keep.nonzero().squeeze(1)  # random replacements are drawn from these

    def __call__(self, ids: torch.Tensor, gen: torch.Generator) -> dict[str, torch.Tensor]:
        c = self.cfg
        selectable = ~torch.isin(ids, self.special)
        selected = (torch.rand(ids.shape, generator=gen) < c.mask_prob) & selectable
        action = torch.rand(ids.shape, generator=gen)
        to_mask = selected & (action < c.mask_replace_prob)
        to_random = selected & (action >= c.mask_replace_prob) & (action < c.mask_replace_prob + c.random_replace_prob)
        random_ids = self.normal_ids[torch.randint(len(self.normal_ids), ids.shape, generator=gen)]
        inputs = torch.where(to_mask, self.tok.mask_id, torch.where(to_random, random_ids, ids))
        positions = selected.flatten().nonzero().squeeze(1)  # [M] flat indices into B*T
        return {"input_ids": inputs, "mlm_positions": positions, "mlm_targets": ids.flatten()[positions]}


@dataclass
class StreamState:
    epoch: int = 0
    batches: int = 0  # global micro-batches consumed in this epoch


class MLMBatchStream:
    """Infinite (train) or single-pass (valid) iterator of this rank's micro-batches."""

    def __init__(self, shards: list[str], cfg: DataConfig, tok: TargetTokenizer, micro_batch: int,
                 rank: int, world: int, loop: bool = True):
        self.shards, self.cfg, self.tok = shards, cfg, tok
        self.micro_batch, self.rank, self.world, self.loop = micro_batch, rank, world, loop
        self.masker = MLMMasker(cfg, tok)
        self.state = StreamState()
        self._it = None

    def state_dict(self) -> dict:
        return {"epoch": self.state.epoch, "batches": self.state.batches}

    def load_state_dict(self, sd: dict) -> None:
        self.state = StreamState(**sd)
        self._it = None

    def _global_batches(self) -> Iterator[np.ndarray]:
        """[world * micro_batch, seq_len] arrays of this epoch, skipping the ones already consumed."""
        n = self.world * self.micro_batch
        rows, done = [], 0
        for seq in packed_sequences(self.shards, self.cfg.seq_len, self.tok, self.cfg.seed, self.state.epoch):
            rows.append(seq)
            if len(rows) == n:
                if done >= self.state.batches:
                    yield np.stack(rows)
                done, rows = done + 1, []

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        while True:
            if self._it is None:
                self._it = self._global_batches()
            block = next(self._it, None)
            if block is not None:
                break
            if not self.loop or self.state.batches == 0:
                if self.state.batches == 0:
                    raise ConfigError(f"shards {self.shards[:3]}... hold fewer than one global batch "
                                      f"({self.world}x{self.micro_batch}x{self.cfg.seq_len} tokens)")
                raise StopIteration
            self.state, self._it = StreamState(epoch=self.state.epoch + 1), None
        mine = torch.from_numpy(block[self.rank * self.micro_batch:(self.rank + 1) * self.micro_batch])
        gen = torch.Generator().manual_seed(hash((self.cfg.seed, self.state.epoch, self.state.batches, self.rank))
                                            & 0x7FFF_FFFF_FFFF_FFFF)
        self.state.batches += 1
        return self.masker(mine, gen)


def build_streams(cfg: DataConfig, tok: TargetTokenizer, micro_batch: int, rank: int, world: int):
    train = MLMBatchStream(expand_shards(cfg.train_shards, tok), cfg, tok, micro_batch, rank, world, loop=True)
    valid = None
    if cfg.valid_shards:
        valid = MLMBatchStream(expand_shards(cfg.valid_shards, tok), cfg, tok, micro_batch, rank, world, loop=False)
    return train, valid
