"""Parallel shards (docs/shard_format.md, "Parallel shards"): one WebDataset sample per sentence pair with
``{key}.src.npy``, ``{key}.tgt.npy``, ``{key}.s2t.npy`` and ``{key}.t2s.npy``, split by document, plus the
split summaries for manifest.json."""
from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_tools.pipeline.shards import id_dtype, shard_name, whole_file
from data_tools.pipeline.split import assign_documents, split_counts
from data_tools.pipeline.state import SPLITS

PARALLEL_FORMAT_VERSION = 1
MEMBERS = ("src", "tgt", "s2t", "t2s")


def link_dtype(max_len: int):
    """Links index the other side (0 .. len - 1) or are -1."""
    return np.int16 if max_len <= 1 << 15 else np.int32


def pair_key(split: str, shard: int, pair: int) -> str:
    """Unique across the corpus; ``pair`` counts pairs across the whole split."""
    return f"{split}-{shard:06d}-{pair:08d}"


@dataclass(frozen=True)
class ShardOptions:
    valid: int | float = 0.05
    """validation documents: a count, or a fraction in [0, 1)"""
    test: int | float = 0.05
    """test documents, like valid"""
    seed: int = 0
    """seed of the document split"""
    shard_pairs: int = 100_000
    """pairs per shard"""


@dataclass
class AlignedCorpus:
    """Per pair: source and target ids, s2t (len source) and t2s (len target) links, and its document."""
    src: list[np.ndarray]
    tgt: list[np.ndarray]
    s2t: list[np.ndarray]
    t2s: list[np.ndarray]
    docs: list[str]

    def dtypes(self, source_vocab: int, target_vocab: int) -> dict[str, np.dtype]:
        longest = max(max(map(len, self.src)), max(map(len, self.tgt)))
        links = np.dtype(link_dtype(longest))
        return {"src": np.dtype(id_dtype(source_vocab)), "tgt": np.dtype(id_dtype(target_vocab)), "s2t": links,
                "t2s": links}

    def split(self, opts: ShardOptions) -> dict[str, np.ndarray]:
        """Pair indices of each split, in corpus order: documents (in order of first appearance) are assigned
        as ``data_tools.pipeline.split`` assigns them, so a document's pairs never straddle two splits."""
        first_seen: dict[str, int] = {}
        doc_of_pair = np.fromiter((first_seen.setdefault(d, len(first_seen)) for d in self.docs), dtype=np.int64,
                                  count=len(self.docs))
        n_valid, n_test = split_counts(len(first_seen), opts.valid, opts.test)
        assign = assign_documents(len(first_seen), n_valid, n_test, opts.seed)[doc_of_pair]
        return {name: np.flatnonzero(assign == s) for s, name in enumerate(SPLITS)}


def _add_member(tar: tarfile.TarFile, name: str, array: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    info = tarfile.TarInfo(name)  # TarInfo defaults (mtime 0, uid 0, mode 0644): byte-identical shards
    info.size = buf.tell()
    buf.seek(0)
    tar.addfile(info, buf)


def write_parallel_shard(path: Path, split: str, index: int, first_pair: int, corpus: AlignedCorpus,
                         pairs: np.ndarray, dtypes: dict[str, np.dtype]) -> None:
    """Write ``{name}.tmpPID``, fsync, rename (``whole_file``): a shard exists under its name only when complete.
    Replacing an earlier run's shard retires that run's manifest.json first: it no longer describes the folder."""
    with whole_file(path) as fh:
        with tarfile.open(fileobj=fh, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for n, k in enumerate(pairs):
                key = pair_key(split, index, first_pair + n)
                for member in MEMBERS:
                    _add_member(tar, f"{key}.{member}.npy", getattr(corpus, member)[k].astype(dtypes[member]))
        if path.exists():
            (path.parent / "manifest.json").unlink(missing_ok=True)


def write_split(out_dir: Path, split: str, corpus: AlignedCorpus, pairs: np.ndarray, dtypes: dict[str, np.dtype],
                shard_pairs: int) -> dict:
    """The split's shards; returns its manifest entry."""
    shards = []
    for index, start in enumerate(range(0, len(pairs), shard_pairs)):
        name = shard_name(split, index)
        write_parallel_shard(out_dir / name, split, index, start, corpus, pairs[start:start + shard_pairs], dtypes)
        shards.append(name)
    return {"shards": shards, "documents": len({corpus.docs[k] for k in pairs}), "pairs": len(pairs),
            "source_tokens": int(sum(len(corpus.src[k]) for k in pairs)),
            "target_tokens": int(sum(len(corpus.tgt[k]) for k in pairs)),
            "links": {"t2s": int(sum(int((corpus.t2s[k] >= 0).sum()) for k in pairs)),
                      "s2t": int(sum(int((corpus.s2t[k] >= 0).sum()) for k in pairs))}}
