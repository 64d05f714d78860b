"""Packed, dynamically masked MLM batches from WebDataset token shards (docs/shard_format.md).

The data is one infinite token stream: epoch e's documents (shards permuted, then a seeded shuffle buffer
over documents), each followed by ``sep``; epochs back to back. Training sequence i is
``cls + stream[i*(L-2):(i+1)*(L-2)] + sep`` (RoBERTa full-sentences packing: no padding). Rank r's
micro-batch b holds sequences ``S0 + (b*R + r)*B + j``, so every sequence, hence every document, is used
exactly once per epoch across ranks, and the loader's whole position is one integer: the global number
of sequences consumed. It survives a restart with any number of DataLoader workers (worker w builds
batches b = w mod W, which the in-order DataLoader returns in order) and with any number of ranks.
Masks (single pieces, whole words or spans: ``xpt_ds.data.masking``) are drawn per sequence from a generator
seeded by (seed, sequence index): no RNG state to save. For a decoder source ``xpt_ds.data.causal`` takes the
masker's place (next-token targets from the same rows).

``data.train_tokens = N`` restricts every training epoch to one fixed subset: the documents of a seeded
permutation of the whole corpus (independent of N and of the epoch), taken in that order until N stream
tokens, the last one cut. So every epoch holds exactly N tokens, and a smaller N's subset is a prefix of a
larger N's (a nested ladder of data sizes). Each epoch still re-shuffles the subset's order.

``data.mix`` blends other corpora into the training stream (``xpt_ds.data.mixture``): sequence i is then packed
from the corpus the mixture's schedule gives it, at that corpus's own row, and the state adds each corpus's row.
"""
from __future__ import annotations

import errno
import hashlib
import logging
import os
from functools import partial

import numpy as np
import torch

from xpt_ds.config import ConfigError, DataConfig
from xpt_ds.data.causal import NextTokenTargets
from xpt_ds.data.manifest import expand_shards, manifest_counts
from xpt_ds.data.masking import select_units, span_begins, span_length_cdf, span_lengths, word_begins
from xpt_ds.data.mixture import MAIN, Mixture, shares
from xpt_ds.data.shards import DataError, DocReader, ShardIndex, scan_shards
from xpt_ds.data.tokenizer import TargetTokenizer
from xpt_ds.data.workers import WorkerFailure, Workers, start_worker
from xpt_ds.metrics.mlm import piece_word_starts

log = logging.getLogger(__name__)


def shuffle_buffer(ids: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Streaming shuffle: hold ``size`` items, emit a random one, put the next in its place; at the end, the
    buffer in random order. Computed without the loop, with the same draws and so the same order: step j's slot is
    ``floor(draw_j * size)``, and it emits what the last earlier step with that slot put there (that step's
    incoming item), or the slot's first item. At 16M documents and a buffer of 10,000 the loop took 8.1 s (numpy
    2.4, the 2-core VM), in every DataLoader worker at every epoch; this takes 3.2 s."""
    if size <= 1 or len(ids) <= 1:
        return ids
    buf = ids[:size].copy()
    incoming = ids[len(buf):]
    slots = (rng.random(len(incoming)) * len(buf)).astype(np.uint16 if len(buf) <= 1 << 16 else np.int64)
    order = np.argsort(slots, kind="stable")  # by slot, then step (a radix sort for uint16)
    same = slots[order[1:]] == slots[order[:-1]]
    earlier, later = order[:-1][same], order[1:][same]  # consecutive steps on the same slot
    out = np.empty_like(ids)
    out[:len(incoming)] = buf[slots]
    out[later] = incoming[earlier]
    last = np.ones(len(incoming), bool)
    last[earlier] = False  # the last step on each slot leaves its item in the buffer
    buf[slots[last]] = incoming[last]
    out[len(incoming):] = rng.permutation(buf)
    return out


LAYOUTS_KEPT = 2  # epoch layouts each TokenStream keeps (its own: a data.mix corpus's rows alternate with others')


class TokenStream:
    """The epoch-concatenated token stream over indexed shards; reads only the tokens asked for."""

    def __init__(self, indexes: list[ShardIndex], tok: TargetTokenizer, cfg: DataConfig, skipped: list[str] = (),
                 max_tokens: int = 0):
        self.skipped = list(skipped)  # corrupt shards left out (data.on_corrupt_shard: skip)
        if not indexes and self.skipped:
            raise DataError(f"every shard is corrupt and was skipped (data.on_corrupt_shard: skip; the warnings above "
                            f"say why): {', '.join(self.skipped[:3])}{' ...' if len(self.skipped) > 3 else ''}")
        if not indexes or sum(len(i.lengths) for i in indexes) == 0:
            raise ConfigError(f"no documents in shards {[i.path for i in indexes][:3]}")
        self.indexes, self.tok, self.cfg = indexes, tok, cfg
        self.doc_shard = np.concatenate([np.full(len(ix.lengths), s, np.int64) for s, ix in enumerate(indexes)])
        self.doc_local = np.concatenate([np.arange(len(ix.lengths), dtype=np.int64) for ix in indexes])
        self.shard_starts = np.concatenate([[0], np.cumsum([len(ix.lengths) for ix in indexes])])
        self.sep = 1 if cfg.doc_separator else 0
        self.doc_tokens = np.concatenate([ix.lengths for ix in indexes]).astype(np.int64) + self.sep
        self.epoch_docs = np.arange(len(self.doc_tokens))  # sorted global ids of the documents every epoch uses
        if not self.doc_tokens.any():  # an epoch of no tokens: no row could ever be packed
            raise ConfigError(f"no tokens in shards {[i.path for i in indexes][:3]}: every document is empty and "
                              "config key 'data.doc_separator' is false")
        if max_tokens:
            self._restrict(max_tokens)
        self.epoch_tokens = int(self.doc_tokens[self.epoch_docs].sum())
        self.reader = DocReader(indexes)
        self._layouts: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # epoch -> layout, least recently used first

    def _restrict(self, max_tokens: int) -> None:
        """Keep the first ``max_tokens`` stream tokens of a seeded document order that depends on neither
        ``max_tokens`` nor the epoch, so subsets of the same seed are nested."""
        total = int(self.doc_tokens.sum())
        if max_tokens > total:
            raise ConfigError(f"config key 'data.train_tokens' is {max_tokens:,} but the training shards hold "
                              f"only {total:,} tokens ({self.indexes[0].path}, ...)")
        # spawn_key keeps this stream apart from the per-epoch default_rng([seed, epoch]) streams
        order = np.random.default_rng(np.random.SeedSequence(self.cfg.seed, spawn_key=(1,))).permutation(
            len(self.doc_tokens))
        cum = np.cumsum(self.doc_tokens[order])
        k = int(np.searchsorted(cum, max_tokens))  # order[k] is the last document, cut to fill up to max_tokens
        self.doc_tokens[order[k]] -= int(cum[k]) - max_tokens  # a cut document keeps its separator
        self.epoch_docs = np.sort(order[:k + 1])

    def layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(global doc ids in epoch order, token offset of each doc in the epoch with a final total), kept for the
        ``LAYOUTS_KEPT`` epochs this stream used last (a row that crosses an epoch's end reads two)."""
        kept = self._layouts.pop(epoch, None)  # re-inserted: the dict's order is the order of use
        if kept is None:
            kept = self._layout(epoch)
        self._layouts[epoch] = kept
        while len(self._layouts) > LAYOUTS_KEPT:
            del self._layouts[next(iter(self._layouts))]
        return kept

    def _layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.cfg.seed, epoch])
        shard_order = rng.permutation(len(self.indexes))
        bounds = np.searchsorted(self.epoch_docs, self.shard_starts)  # shard s: epoch_docs[bounds[s]:bounds[s+1]]
        docs = np.concatenate([self.epoch_docs[bounds[s]:bounds[s + 1]] for s in shard_order])
        docs = shuffle_buffer(docs, self.cfg.shuffle_docs, rng)
        return docs, np.concatenate([[0], np.cumsum(self.doc_tokens[docs])])

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Stream positions ``[start, stop)``."""
        out, pos = [], start
        while pos < stop:
            epoch, off = divmod(pos, self.epoch_tokens)
            docs, cum = self.layout(epoch)
            k = int(np.searchsorted(cum, off, side="right")) - 1
            doc, a = int(docs[k]), off - int(cum[k])
            b = min(int(self.doc_tokens[doc]), a + stop - pos)
            body_end = min(b, int(self.doc_tokens[doc]) - self.sep)
            if a < body_end:
                out.append(self._read(doc, a, body_end))
            if b > body_end:
                out.append(np.array([self.tok.sep_id], np.int64))
            pos += b - a
        return np.concatenate(out)

    def piece_counts(self) -> np.ndarray:
        """int64 [vocab]: occurrences of each id in one epoch's documents, separators left out (an epoch holds
        the same documents in every order; with ``max_tokens`` the cut document counts up to its cut)."""
        counts = np.zeros(self.tok.vocab_size, np.int64)
        for d in self.epoch_docs:
            body = int(self.doc_tokens[d]) - self.sep
            if body > 0:
                counts += np.bincount(self._read(int(d), 0, body), minlength=self.tok.vocab_size)
        return counts

    def _read(self, doc: int, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of global document ``doc``; an id outside the vocabulary names its shard."""
        shard, local = int(self.doc_shard[doc]), int(self.doc_local[doc])
        ids = self.reader.read(shard, local, start, stop).astype(np.int64)
        if ids.size and ids.max() >= self.tok.vocab_size:
            raise DataError(f"shard {self.indexes[shard].path} (document {local}) holds token id {ids.max()} >= "
                            f"vocab size {self.tok.vocab_size} of {self.tok.path}, which the scan at the start did "
                            "not find: the shard changed during the run (replaced or corrupt)")
        return ids


class MLMMasker:
    """Vectorised 80/10/10 masking of single pieces, whole words or spans (``data.masking``) that never masks or
    produces special tokens, seeded per sequence. ``word_starts``: [V] 1 where a piece begins a word, for a
    vocabulary that is no ``TargetTokenizer`` (default: ``piece_word_starts(tok, split_punctuation=True)``)."""

    def __init__(self, cfg: DataConfig, tok: TargetTokenizer, word_starts: torch.Tensor | None = None):
        self.cfg, self.tok = cfg, tok
        self.special = torch.tensor(tok.special_ids)
        keep = torch.ones(tok.vocab_size, dtype=torch.bool)
        keep[self.special] = False
        self.normal_ids = keep.nonzero().squeeze(1)  # random replacements are drawn from these
        if cfg.masking != "token":
            self.starts_word = (piece_word_starts(tok, split_punctuation=True) if word_starts is None
                                else word_starts).bool()
            self.span_cdf = span_length_cdf(cfg.span_p, cfg.span_max)

    def __call__(self, ids: torch.Tensor, seeds: list[int]) -> dict[str, torch.Tensor]:
        c, T = self.cfg, ids.shape[1]
        draws = []
        for seed in seeds:  # [B] generators: masks depend on the sequence, not on batch or world size
            g = torch.Generator().manual_seed(seed)
            row = [torch.rand(T, generator=g), torch.rand(T, generator=g),
                   torch.randint(len(self.normal_ids), (T,), generator=g)]
            if c.masking != "token":  # drawn after token's three, which stay what they always were
                row += [torch.rand(1, generator=g)] + ([torch.rand(T, generator=g)] if c.masking == "span" else [])
            draws.append(row)
        select_u, action_u, random_i, *units = (torch.stack(x) for x in zip(*draws))  # [B, T] each, ([B, 1], [B, T])
        special = torch.isin(ids, self.special)
        if c.masking == "token":
            selected = (select_u < c.mask_prob) & ~special
        else:  # select_u: one sort key per word or span
            selected = self._select_units(ids, special, select_u, *units)
        to_mask = selected & (action_u < c.mask_replace_prob)
        to_random = selected & ~to_mask & (action_u < c.mask_replace_prob + c.random_replace_prob)
        inputs = torch.where(to_mask, self.tok.mask_id, torch.where(to_random, self.normal_ids[random_i], ids))
        positions = selected.flatten().nonzero().squeeze(1)  # [M] flat indices into B*T
        return {"input_ids": inputs, "mlm_positions": positions, "mlm_targets": ids.flatten()[positions]}

    def _select_units(self, ids: torch.Tensor, special: torch.Tensor, keys: torch.Tensor, last: torch.Tensor,
                      length_u: torch.Tensor | None = None) -> torch.Tensor:
        begins = word_begins(ids, special, self.starts_word)
        if self.cfg.masking == "span":
            begins = span_begins(begins, special, span_lengths(length_u, self.span_cdf))
        return select_units(begins, ~special, keys, last.squeeze(1), self.cfg.mask_prob)


def sequence_seed(seed: int, salt: int, i: int) -> int:
    """Mask seed of sequence i (salt 0: training, 1: validation and evaluate, 2: the probe's source text, 3: TreLM's
    English training text, data.source_shards)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}/{salt}/{i}".encode(), digest_size=8).digest(), "little") >> 1


class _BatchPlan:
    """Which sequences make up rank r's micro-batch b, and how to build it; with a ``mixture``, which corpus and
    row each sequence reads (``blend``: ``Mixture.blend`` as the training process set it)."""

    def __init__(self, stream: TokenStream, masker: MLMMasker | NextTokenTargets, micro_batch: int, rank: int,
                 world: int, first_sequence: int, *blend: int, single_pass: bool, salt: int,
                 mixture: Mixture | None = None):
        self.stream, self.masker, self.mixture = stream, masker, mixture
        if mixture is not None:  # a worker's own copy of it, or the training process's (no change)
            mixture.use(list(blend))
        self.B, self.rank, self.world, self.first = micro_batch, rank, world, first_sequence
        self.body = stream.cfg.seq_len - 2
        self.salt = salt
        # single pass (validation): epoch 0 only; the last sequence is padded, missing rows are all padding.
        self.n_sequences = -(-stream.epoch_tokens // self.body) if single_pass else None
        self.n_batches = -(-(self.n_sequences - first_sequence) // (micro_batch * world)) if single_pass else None

    def batch(self, b: int) -> dict[str, torch.Tensor]:
        tok, L = self.stream.tok, self.stream.cfg.seq_len
        seq_ids = [self.first + (b * self.world + self.rank) * self.B + j for j in range(self.B)]
        rows = np.full((self.B, L), tok.pad_id, np.int64)
        for j, i in enumerate(seq_ids):
            src, k = (self.stream, i) if self.mixture is None else self.mixture.locate(i)
            stop = (k + 1) * self.body
            if self.n_sequences is not None:  # past the end: an empty cls+sep row keeps the attention row valid
                stop = min(stop, src.epoch_tokens)
            body = src.tokens(k * self.body, stop) if k * self.body < stop else np.empty(0, np.int64)
            rows[j, 0], rows[j, 1:1 + len(body)], rows[j, 1 + len(body)] = tok.cls_id, body, tok.sep_id
        ids = torch.from_numpy(rows)
        out = self.masker(ids, [sequence_seed(self.stream.cfg.seed, self.salt, i) for i in seq_ids])
        out["seq_ids"] = torch.tensor(seq_ids)
        if getattr(self.masker, "pads_need_attention_mask", True) and (ids == tok.pad_id).any():
            out["attention_mask"] = (ids != tok.pad_id).long()
        return out


WORKER_RESTARTS = 2  # times a stream restarts workers that delivered nothing in worker_timeout_s, before it fails


class MLMBatchStream:
    """This rank's micro-batches: infinite for training, one pass over epoch 0 for validation.

    The batches are built in ``num_workers`` DataLoader worker processes (``xpt_ds.data.workers``), forked once:
    by ``fork_workers``, which the trainer calls at the end of its build, or else at the first batch. A new pass, a
    resume or a rewind restarts the same processes at the stream's sequence, its whole state. Workers that deliver
    no batch for ``worker_timeout_s`` are shut down and forked again at that sequence, which gives the same
    batches: seen when CPython deadlocked a worker forked mid-run (gh-112275, ``xpt_ds.data.workers``).
    """

    worker_timeout_s = 120.0  # tests lower it
    worker_init_fn = staticmethod(start_worker)  # tests replace it

    def __init__(self, stream: TokenStream, masker: MLMMasker | NextTokenTargets, micro_batch: int, rank: int,
                 world: int, num_workers: int, single_pass: bool = False, salt: int | None = None,
                 mixture: Mixture | None = None):
        self.stream, self.masker, self.mixture = stream, masker, mixture  # stream: data.train_shards' (mixture's 1st)
        self.micro_batch, self.rank, self.world = micro_batch, rank, world
        salt = (1 if single_pass else 0) if salt is None else salt  # sequence_seed
        self.sequences = 0  # global sequences consumed, the loader's whole state (with a mixture's positions)
        plan = partial(_BatchPlan, stream, masker, micro_batch, rank, world, single_pass=single_pass, salt=salt,
                       mixture=mixture)
        self.workers = Workers(plan, num_workers, self.worker_timeout_s, self.worker_init_fn,
                               1 + len(mixture.blend() if mixture else []))
        self._it = None  # the workers' iterator from self.sequences on; None: restart them there at the next batch

    def state_dict(self) -> dict:
        sd = {"sequences": self.sequences, "seq_len": self.stream.cfg.seq_len}
        return {**sd, "positions": self.positions()} if self.mixture else sd

    def positions(self) -> dict[str, int]:
        """Corpus name -> its rows read so far (``train``: data.train_shards)."""
        return self.mixture.positions(self.sequences) if self.mixture else {MAIN: self.sequences}

    def load_state_dict(self, sd: dict) -> None:
        """Sequence i holds the stream's tokens [i * (seq_len - 2), (i + 1) * (seq_len - 2)): a state saved at
        another ``data.seq_len`` (a 128 -> 512 schedule) continues at the first sequence that starts at or after
        the token where it stopped, skipping less than one sequence and repeating none. With a mixture, each
        corpus continues at its own saved row (a corpus the state lacks: at its start); without one, the state of
        a mixed stream continues data.train_shards' corpus where it stopped."""
        saved, body = int(sd.get("seq_len", self.stream.cfg.seq_len)), self.stream.cfg.seq_len - 2

        def now(rows: int) -> int:  # the first sequence at the current length at or after that row's first token
            return rows if saved == body + 2 else -(-rows * (saved - 2) // body)

        positions = {name: now(int(rows)) for name, rows in sd.get("positions", {MAIN: sd["sequences"]}).items()}
        self.sequences, self._it = now(int(sd["sequences"])) if self.mixture else positions.get(MAIN, 0), None
        if self.mixture:
            self.mixture.restore(self.sequences, positions)
        if saved != body + 2 and self.rank == 0:
            log.warning("data.seq_len %d -> %d: the data stream stopped at token %d (sequence %d) and continues "
                        "at token %d (sequence %d at the new length)", saved, body + 2, int(sd["sequences"]) * (
                            saved - 2), int(sd["sequences"]), self.sequences * body, self.sequences)

    def reweight(self, weights: list[float]) -> None:
        """Blend the corpora at ``weights`` (``data.train_shards``' first) from the current sequence on, each corpus
        continuing at its row (a phase's ``phases[i].mix``)."""
        if self.mixture.reweight(self.sequences, weights):
            self._it = None  # the workers restart with the new schedule
            if self.rank == 0:
                log.info("data.mix from sequence %d: %s", self.sequences, shares(self.mixture))

    @property
    def epoch(self) -> int:
        """data.train_shards' epoch."""
        return self.positions()[MAIN] * (self.stream.cfg.seq_len - 2) // self.stream.epoch_tokens

    def mixed_epochs(self) -> dict[str, int]:
        """Each data.mix corpus's epoch."""
        if not self.mixture:
            return {}
        epochs = self.mixture.epochs(self.sequences, self.stream.cfg.seq_len - 2)
        return {name: e for name, e in epochs.items() if name != MAIN}

    def fork_workers(self) -> None:
        """Fork the worker processes now, while the rank runs no other thread that could hold an interpreter lock
        (``xpt_ds.data.workers``); they wait for the first batch."""
        self.workers.fork()

    def close(self) -> None:
        """Shut the worker processes down (they ignore stop signals, so they wait to be told)."""
        self._it = None
        self.workers.close()

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        for attempt in range(WORKER_RESTARTS + 1):
            try:
                if self._it is None:
                    self._it = self.workers.run(self.sequences, *(self.mixture.blend() if self.mixture else []))
                batch = next(self._it)
                break
            except RuntimeError as e:
                if self.workers.ran_out_of_files:  # as an OSError, which the commands name as the limit
                    raise OSError(errno.EMFILE, f"{os.strerror(errno.EMFILE)} (a DataLoader worker handing over a "
                                  "batch)") from e
                if not str(e).startswith("DataLoader timed out") or attempt == WORKER_RESTARTS:
                    raise
                log.warning("rank %d: no batch from the DataLoader workers in %.0f s (a worker deadlocked at its "
                            "start? CPython 3.8-3.11 before September 2024's releases can: gh-112275): forking new "
                            "ones at sequence %d", self.rank, self.worker_timeout_s, self.sequences)
                self.close()
        if isinstance(batch, WorkerFailure):
            raise DataError(batch.message)
        self.sequences += self.micro_batch * self.world
        return batch


def build_stream(shards: list[str], cfg: DataConfig, tok: TargetTokenizer, max_tokens: int = 0,
                 expected: dict[str, tuple] | None = None) -> TokenStream:
    """``max_tokens`` > 0: every epoch is the same fixed subset of that many tokens (training only).
    ``expected``: ``manifest_counts`` of the specs the shards came from."""
    indexes, skipped = scan_shards(shards, cfg.on_corrupt_shard, expected, (tok.vocab_size, tok.path),
                                   tok.not_in_shards)
    if skipped:
        log.warning("skipped %d corrupt shard(s) of %d: %s", len(skipped), len(shards), ", ".join(skipped))
    return TokenStream(indexes, tok, cfg, skipped, max_tokens)


def build_streams(cfg: DataConfig, tok: TargetTokenizer, micro_batch: int, rank: int, world: int,
                  causal: bool = False):
    """(training stream, validation stream or None); ``causal``: next-token rows (``xpt_ds.data.causal``) in
    place of masked ones, from the same packing. With ``data.mix`` the training stream blends its corpora."""
    masker = NextTokenTargets(tok) if causal else MLMMasker(cfg, tok)
    main = build_stream(expand_shards(cfg.train_shards, tok), cfg, tok, cfg.train_tokens,
                        manifest_counts(cfg.train_shards))
    mixture = None
    if cfg.mix:
        mixed = [build_stream(expand_shards(m.shards, tok), cfg, tok, 0, manifest_counts(m.shards)) for m in cfg.mix]
        mixture = Mixture([MAIN] + [m.name for m in cfg.mix], [main] + mixed,
                          [1 - sum(m.weight for m in cfg.mix)] + [m.weight for m in cfg.mix])
        if rank == 0:
            log.info("data.mix: the training rows come from %s", shares(mixture, epochs=True))
    train = MLMBatchStream(main, masker, micro_batch, rank, world, cfg.num_workers, mixture=mixture)
    valid = None
    if cfg.valid_shards:
        valid = _validation(cfg.valid_shards, cfg, masker, micro_batch, rank, world)
    return train, valid


def _validation(specs: list[str], cfg: DataConfig, masker, micro_batch: int, rank: int,
                world: int) -> MLMBatchStream:
    tok = masker.tok
    return MLMBatchStream(build_stream(expand_shards(specs, tok), cfg, tok, 0, manifest_counts(specs)), masker,
                          micro_batch, rank, world, cfg.num_workers, single_pass=True)


def build_mix_validation(cfg: DataConfig, train: MLMBatchStream) -> dict[str, MLMBatchStream]:
    """Name -> validation stream of each data.mix corpus that has ``valid_shards``, with ``train``'s masker (or
    next-token targets), batch and rank."""
    return {m.name: _validation(m.valid_shards, cfg, train.masker, train.micro_batch, train.rank, train.world)
            for m in cfg.mix if m.valid_shards}


def build_source_stream(cfg: DataConfig, source_tok: TargetTokenizer, micro_batch: int, rank: int,
                        world: int) -> MLMBatchStream:
    """TreLM's English MLM sequences (data.source_shards, in model.source's tokenizer ids): the training stream's
    packing and masking with their own mask seeds (salt 3) and the whole corpus every epoch."""
    return MLMBatchStream(build_stream(expand_shards(cfg.source_shards, source_tok), cfg, source_tok, 0,
                                       manifest_counts(cfg.source_shards)), MLMMasker(cfg, source_tok), micro_batch,
                          rank, world, cfg.num_workers, salt=3)
