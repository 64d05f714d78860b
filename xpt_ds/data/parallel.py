"""CdLM rows from parallel shards (docs/shard_format.md, "Parallel shards"); ``xpt_ds.trelm.data`` joins them to
the other objectives' rows.

Pairs are one sequence indexed by a global pair counter: pair k is pair ``perm_e[k mod n]`` of the corpus, with
e = k div n and ``perm_e`` a permutation seeded by (data.seed, e). Rank r's CdLM rows for a micro-batch are pairs
``P + r*Bp + j`` (j < Bp = data.parallel_micro_batch), P the pairs all ranks consumed before it, so the pair
stream's whole state is P, as the MLM stream's is its sequence count: a restart resumes exactly, with any number
of ranks. Both directions of a phase that trains both read the same pairs. Pairs are read in the training
process (a few hundred bytes each); the MLM side keeps its DataLoader workers.

A CdLM row (004 §3.1) in direction en->X is S = ``cls + source + sep`` in the source's Hugging Face tokenizer ids
(``model.source``), padded; W = the target pieces and the final ``sep`` (004 A.7 reads the generated ``sep`` as
the stop mark), all predicted; the order is ``cls <- cls``, target piece j <- source piece t2s[j] (the placeholder
where t2s[j] = -1), ``sep <- sep``, padding <- placeholder. Direction X->en swaps the sides: S = the target
sentence in SentencePiece ids with the target's ``cls``/``sep``, W = the English pieces and the English ``sep``,
English piece i <- target piece s2t[i] (004 Alg. 1, j = 1: the reverse alignment A_{Y->X}). A side longer than
data.seq_len - 2 pieces is cut, and links into the cut part of the input become placeholders. Every micro-batch
has the same number of rows of each kind on every rank, so all ranks take the same forward path (ZeRO-3).
"""
from __future__ import annotations

import hashlib
import logging
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import braceexpand
import numpy as np
import torch

from xpt_ds.config import ConfigError, TrainConfig
from xpt_ds.data.manifest import read_manifest
from xpt_ds.errors import no_file
from xpt_ds.data.shards import (
    DataError,
    DocReader,
    ShardIndex,
    check_archive_end,
    document_extrema,
    first_special,
    read_member_header,
    scan_each,
)
from xpt_ds.data.tokenizer import TargetTokenizer
from xpt_ds.io.digest import sha256_file

PARALLEL_FORMAT_VERSION = 1
MEMBERS = ("src", "tgt", "s2t", "t2s")
_IDS, _LINKS = (np.uint16, np.uint32), (np.int16, np.int32)
KEY = "config key 'data.parallel_shards'"
log = logging.getLogger(__name__)


def _check_manifest(manifest: Path, meta: dict, tok: TargetTokenizer, source_tok: TargetTokenizer) -> None:
    if meta.get("kind") != "parallel":
        raise ConfigError(f"{KEY}: {manifest} is not a parallel manifest (no \"kind\": \"parallel\"); monolingual "
                          "shards belong in data.train_shards")
    if meta.get("format_version") != PARALLEL_FORMAT_VERSION:
        raise ConfigError(f"{KEY}: {manifest} has format_version {meta.get('format_version')}, expected "
                          f"{PARALLEL_FORMAT_VERSION}")
    target, source = meta.get("target_tokenizer"), meta.get("source_tokenizer")
    if not isinstance(target, dict) or not isinstance(source, dict):
        raise ConfigError(f"{KEY}: {manifest} lacks its target_tokenizer or source_tokenizer record (objects)")
    sha = hashlib.sha256(Path(tok.path).read_bytes()).hexdigest()
    if target.get("sha256") != sha or target.get("vocab_size") != tok.vocab_size:
        raise ConfigError(f"{KEY}: {manifest}'s target side was tokenized with {target.get('file')} (sha256 "
                          f"{str(target.get('sha256'))[:12]}…), not with model.tokenizer {tok.path} ({sha[:12]}…)")
    if source.get("vocab_size") != source_tok.vocab_size:
        raise ConfigError(f"{KEY}: {manifest}'s source side was tokenized with {source.get('name')} "
                          f"({source.get('vocab_size')} entries), not with model.source's tokenizer "
                          f"{source_tok.path} ({source_tok.vocab_size})")


def expand_parallel_shards(specs: list[str], tok: TargetTokenizer, source_tok: TargetTokenizer) -> list[str]:
    """Paths, brace patterns or ``manifest.json:split`` of a parallel manifest, whose tokenizers must be the run's."""
    out = []
    for spec in specs:
        path, _, split = spec.partition(".json:")
        if not split:
            out += list(braceexpand.braceexpand(spec))
            continue
        manifest = Path(path + ".json")
        meta = read_manifest(manifest, KEY)
        _check_manifest(manifest, meta, tok, source_tok)
        if split not in meta["splits"]:
            raise ConfigError(f"{KEY}: manifest {manifest} has no split '{split}' (has {', '.join(meta['splits'])})")
        out += [str(manifest.parent / s) for s in meta["splits"][split]["shards"]]
    for s in out:
        if not Path(s).is_file():
            raise ConfigError(f"{KEY}: {no_file(s, 'shard', spec=True)}")
    if not out:
        raise ConfigError(f"{KEY}: {specs} name no shards")
    return out


def parallel_digests(specs: list[str]) -> dict[str, str]:
    """Shard path -> the sha256 its parallel manifest records (``files``), for the shards named through one."""
    digests = {}
    for spec in specs:
        path, _, split = spec.partition(".json:")
        if split:
            manifest = Path(path + ".json")
            meta = read_manifest(manifest, KEY)
            files = meta.get("files") if isinstance(meta.get("files"), dict) else {}
            digests.update({str(manifest.parent / name): files[name] for name in meta["splits"][split]["shards"]
                            if name in files})
    return digests


@dataclass(frozen=True)
class PairShard:
    """One parallel shard as four document indexes over the same file: source ids, target ids, both link arrays."""
    src: ShardIndex
    tgt: ShardIndex
    t2s: ShardIndex
    s2t: ShardIndex


def scan_pair_shard(path: str, vocabs: tuple[int, int] | None = None, sha256: str | None = None,
                    forbidden: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())) -> PairShard:
    """Index a parallel shard from its tar and .npy headers; DataError naming the shard if it is corrupt. With
    ``vocabs`` = (source vocab size, target vocab size) it also reads every pair once (a sequential read of the
    shard), so that an id outside a vocabulary or a link outside its side fails here, before training. ``sha256``
    (its manifest's record): the file's must be the same. ``forbidden``: the (source, target) special ids
    (``TargetTokenizer.not_in_shards``) no side may hold, as ``shards.scan_shard``'s."""
    found: dict[str, dict[str, tuple]] = {}  # key -> member -> (dtype, length, offset)
    try:
        size = Path(path).stat().st_size
        with open(path, "rb") as fh, tarfile.open(fileobj=fh, mode="r:") as tar:
            for member in tar:
                key, _, rest = member.name.partition(".")
                kind = rest.removesuffix(".npy")
                if not member.isfile() or kind not in MEMBERS:
                    continue
                found.setdefault(key, {})[kind] = read_member_header(fh, member, size,
                                                                     _IDS if kind in ("src", "tgt") else _LINKS)
            check_archive_end(fh, tar, size)
        if sha256 and sha256_file(path) != sha256:
            raise ValueError(f"its sha256 is not the {sha256[:12]}… its manifest records: its bytes changed after it "
                             "was written")
        for key, m in found.items():
            if len(m) != len(MEMBERS):
                raise ValueError(f"pair {key} lacks {', '.join(k for k in MEMBERS if k not in m)}")
            if m["t2s"][1] != m["tgt"][1] or m["s2t"][1] != m["src"][1]:
                raise ValueError(f"pair {key}: links do not match the lengths of its sides")
        indexes = []
        for kind in ("src", "tgt", "t2s", "s2t"):
            dtypes = {m[kind][0] for m in found.values()}
            if len(dtypes) > 1:
                raise ValueError(f"mixed {kind} dtypes {sorted(map(str, dtypes))}")
            indexes.append(ShardIndex(path, np.array([m[kind][2] for m in found.values()], np.int64),
                                      np.array([m[kind][1] for m in found.values()], np.int64),
                                      dtypes.pop() if dtypes else np.dtype(_IDS[0])))
        if vocabs is not None:
            indexes = _check_pairs(path, *indexes, *vocabs)
    except (tarfile.TarError, ValueError, EOFError, OSError) as e:
        raise DataError(f"corrupt parallel shard {path}: {e}") from None
    _check_specials(path, indexes[0], indexes[1], forbidden)
    return PairShard(*indexes)


def _check_specials(path: str, src: ShardIndex, tgt: ShardIndex, forbidden: tuple[tuple[int, ...], tuple[int, ...]]
                    ) -> None:
    """DataError naming the shard, the pair and the id if a side holds one of its special ids: a pair's sides are
    text (the reader adds cls/sep), and a mask or sep inside one would be read as that role."""
    for side, ix, ids in (("source", src, forbidden[0]), ("target", tgt, forbidden[1])):
        found = first_special(path, ix.offsets, ix.lengths, ix.dtype, tuple(ids), "parallel shard")
        if found is not None:
            raise DataError(f"parallel shard {path} (pair {found[0]}) holds {side} special token id {found[1]}: "
                            "pairs hold text only (no pad, cls/bos, sep/eos or mask ids; docs/shard_format.md); it "
                            "was written by a tool that kept them (xpt-data parallel before 2026-12-03 kept a special "
                            "token spelled in the text: run it again), or is corrupt")


def _check_pairs(path: str, src: ShardIndex, tgt: ShardIndex, t2s: ShardIndex, s2t: ShardIndex, source_vocab: int,
                 target_vocab: int) -> list[ShardIndex]:
    """``PairCorpus.pair``'s checks for every pair at once (ValueError naming the first bad pair); the indexes
    with their largest ids."""
    lo, hi = zip(*(document_extrema(path, ix.offsets, ix.lengths, ix.dtype) for ix in (src, tgt, t2s, s2t)))
    checks = ((hi[0] >= source_vocab, "source id", hi[0], f">= the source vocab size {source_vocab}"),
              (hi[1] >= target_vocab, "target id", hi[1], f">= the target vocab size {target_vocab}"),
              ((lo[2] < -1) | (hi[2] >= src.lengths), "t2s link", np.where(lo[2] < -1, lo[2], hi[2]),
               "outside the source side"),
              ((lo[3] < -1) | (hi[3] >= tgt.lengths), "s2t link", np.where(lo[3] < -1, lo[3], hi[3]),
               "outside the target side"))
    for bad, what, value, why in checks:
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(f"pair {k} holds {what} {value[k]} {why}")
    return [ShardIndex(ix.path, ix.offsets, ix.lengths, ix.dtype, int(m.max()) if len(m) else -1)
            for ix, m in zip((src, tgt, t2s, s2t), hi)]


def scan_pair_shards(paths: list[str], on_corrupt: str, vocabs: tuple[int, int], digests: dict[str, str] | None = None,
                     forbidden: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
                     ) -> tuple[list[PairShard], list[str]]:
    """The readable parallel shards, and the skipped ones (``on_corrupt='skip'``, as ``shards.scan_shards``).
    ``digests``: ``parallel_digests``; ``forbidden``: as ``scan_pair_shard``'s."""
    return scan_each(paths, on_corrupt,
                     lambda path: scan_pair_shard(path, vocabs, (digests or {}).get(path), forbidden),
                     lambda path: ("pairs", vocabs, (digests or {}).get(path), forbidden), lambda _, ix: PairShard(*ix))


class PairCorpus:
    """Every pair of the shards, in a seeded order per epoch; reads only the pairs asked for."""

    def __init__(self, shards: list[PairShard], seed: int, source_vocab: int, target_vocab: int,
                 skipped: list[str] = ()):
        self.shards, self.seed = shards, seed
        self.skipped = list(skipped)  # corrupt shards left out (data.on_corrupt_shard: skip)
        self.source_vocab, self.target_vocab = source_vocab, target_vocab
        if not sum(len(s.src.lengths) for s in shards):
            where = shards[0].src.path if shards else f"the shards (skipped as corrupt: {', '.join(self.skipped)})"
            raise ConfigError(f"{KEY}: no pairs in {where}")
        self.pair_shard = np.concatenate([np.full(len(s.src.lengths), i, np.int64) for i, s in enumerate(shards)])
        self.pair_local = np.concatenate([np.arange(len(s.src.lengths), dtype=np.int64) for s in shards])
        self.readers = {kind: DocReader([getattr(s, kind) for s in shards]) for kind in MEMBERS}

    def __len__(self) -> int:
        return len(self.pair_shard)

    @lru_cache(maxsize=2)
    def permutation(self, epoch: int) -> np.ndarray:
        # spawn_key (2, epoch): apart from the MLM stream's default_rng([seed, epoch]) and its subset order
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(2, epoch))).permutation(len(self))

    def lengths(self, k: int) -> tuple[int, int]:
        """(source pieces, target pieces) of global pair index ``k``, from the shard index alone (nothing read):
        what every rank's CdLM rows of a micro-batch hold, for the throughput counts."""
        epoch, i = divmod(k, len(self))
        g = int(self.permutation(epoch)[i])
        shard, local = self.shards[int(self.pair_shard[g])], int(self.pair_local[g])
        return int(shard.src.lengths[local]), int(shard.tgt.lengths[local])

    def pair(self, k: int, links: str = "t2s") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(source ids, target ids, ``links``: the t2s or s2t array) of global pair index ``k``; bad ids or links
        name the shard."""
        epoch, i = divmod(k, len(self))
        g = int(self.permutation(epoch)[i])
        shard, local = int(self.pair_shard[g]), int(self.pair_local[g])
        src, tgt, link = (self.readers[kind].read(shard, local).astype(np.int64) for kind in ("src", "tgt", links))
        into = len(src) if links == "t2s" else len(tgt)  # the side the links point into
        bad = (src.size and src.max() >= self.source_vocab, tgt.size and tgt.max() >= self.target_vocab,
               link.size and (link.min() < -1 or link.max() >= into))
        if any(bad):
            what = ("source id >= the source vocabulary", "target id >= the target vocabulary",
                    f"{links} link outside the {'source' if links == 't2s' else 'target'}")[bad.index(True)]
            raise DataError(f"parallel shard {self.shards[shard].src.path} (pair {local}) holds a {what}")
        return src, tgt, link


def cdlm_rows(pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]], seq_len: int, in_tok: TargetTokenizer,
              out_tok: TargetTokenizer) -> dict[str, torch.Tensor]:
    """CdLM rows (module docstring) from (input pieces, output pieces, output-to-input links) triples: [Bp, L]
    input ids (``in_tok``'s cls/sep/pad), input mask, order, output mask; every output piece and ``out_tok``'s
    sep predicted, at positions flat in [Bp*L]."""
    B, L, body = len(pairs), seq_len, seq_len - 2
    ids = np.full((B, L), in_tok.pad_id, np.int64)
    order = np.full((B, L), -1, np.int64)
    in_mask, out_mask = np.zeros((B, L), np.int64), np.zeros((B, L), np.int64)
    positions, targets = [], []
    for j, (inp, out, links) in enumerate(pairs):
        inp, out, links = inp[:body], out[:body], links[:body]
        ni, no = len(inp), len(out)
        ids[j, 0], ids[j, 1:1 + ni], ids[j, 1 + ni] = in_tok.cls_id, inp, in_tok.sep_id
        aligned = np.where((links >= 0) & (links < ni), links + 1, -1)  # -1: the placeholder
        order[j, 0], order[j, 1:1 + no], order[j, 1 + no] = 0, aligned, 1 + ni
        in_mask[j, :ni + 2] = out_mask[j, :no + 2] = 1
        positions.append(j * L + np.arange(1, no + 2))
        targets.append(np.append(out, out_tok.sep_id))
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(in_mask),
            "order": torch.from_numpy(order), "output_mask": torch.from_numpy(out_mask),
            "positions": torch.from_numpy(np.concatenate(positions)),
            "targets": torch.from_numpy(np.concatenate(targets))}


def build_pair_corpus(cfg: TrainConfig, tok: TargetTokenizer, source_tok: TargetTokenizer) -> PairCorpus:
    """The pairs of data.parallel_shards, whose sides must be in ``tok``'s and ``source_tok``'s ids."""
    paths = expand_parallel_shards(cfg.data.parallel_shards, tok, source_tok)
    shards, skipped = scan_pair_shards(paths, cfg.data.on_corrupt_shard, (source_tok.vocab_size, tok.vocab_size),
                                       parallel_digests(cfg.data.parallel_shards),
                                       (source_tok.not_in_shards, tok.not_in_shards))
    if skipped:
        log.warning("skipped %d corrupt parallel shard(s) of %d: %s", len(skipped), len(paths), ", ".join(skipped))
    return PairCorpus(shards, cfg.data.seed, source_tok.vocab_size, tok.vocab_size, skipped)
