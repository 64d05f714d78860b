"""The parallel-data pipeline for TreLM-style training (004): sentence pairs -> subword ids on each side ->
alignments in both directions -> parallel shards, manifest.json and dictionary.tsv (docs/shard_format.md,
"Parallel shards"); ``build_parallel`` runs it for ``xpt-data parallel``.

The source side is tokenised by the English source model's Hugging Face tokenizer, the target side by the
target SentencePiece model (the one that made the target MLM shards), both without special tokens. Pairs with
an empty side, or a side with no pieces or more than ``max_pieces``, are dropped and counted. The aligner
(``fast_align``: ``data_tools.pairs.align``, fast_align -d -o -v in numpy; or ``eflomal`` if installed) runs
once over all pairs, as fast_align is run over a whole corpus, in both directions without symmetrisation; the
split into train/valid/test is by document afterwards, and the dictionary counts train links only.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from data_tools.errors import PrepareError
from data_tools.pairs.align import AlignerConfig, Direction, align_both
from data_tools.pairs.dictionary import count_links, write_dictionary
from data_tools.pairs.pair_tokenizers import SourceTokenizer, TargetTokenizer, sha256_file
from data_tools.pairs.parallel_shards import PARALLEL_FORMAT_VERSION, AlignedCorpus, ShardOptions, write_split
from data_tools.pairs.parallel_text import ParallelInput, ParallelText, read_parallel
from data_tools.pipeline.log import log
from data_tools.pipeline.shards import atomic_write_text

ALIGNERS = ("fast_align", "eflomal")
DICTIONARY = "dictionary.tsv"


@dataclass(frozen=True)
class ParallelOptions:
    out: Path
    input: ParallelInput
    source_tokenizer: str
    """the English source model's tokenizer: a local directory or a hub id (AutoTokenizer)"""
    target_tokenizer: Path
    """the target SentencePiece model"""
    aligner: str = "fast_align"
    align: AlignerConfig = field(default_factory=AlignerConfig)
    shards: ShardOptions = field(default_factory=ShardOptions)
    max_pieces: int = 510
    """drop a pair with more pieces than this on either side (510 + cls + sep fit 512 positions)"""
    dictionary_min_count: int = 2
    """dictionary.tsv keeps (target piece, source token) pairs with at least this many links"""

    def validate(self) -> None:
        if self.aligner not in ALIGNERS:
            raise PrepareError(f"unknown aligner '{self.aligner}' (valid: {', '.join(ALIGNERS)})")
        if self.max_pieces < 1 or self.shards.shard_pairs < 1 or self.dictionary_min_count < 1:
            raise PrepareError("--max-pieces, --shard-pairs and --dictionary-min-count must be at least 1")
        self.align.validate()
        existing = Path(self.out) / "manifest.json"
        if existing.is_file() and _kind(existing) != "parallel":
            raise PrepareError(f"{existing} is a monolingual manifest; write parallel data to another --out")


def _kind(manifest: Path) -> str | None:
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("kind")
    except (ValueError, AttributeError):
        return None


@dataclass
class Tokenized:
    src: list[np.ndarray]
    tgt: list[np.ndarray]
    docs: list[str]
    no_pieces: int = 0
    too_long: int = 0


def tokenize_pairs(text: ParallelText, source: SourceTokenizer, target: TargetTokenizer,
                   max_pieces: int) -> Tokenized:
    src, tgt = source.encode(text.source), target.encode(text.target)
    out = Tokenized([], [], [])
    for s, t, d in zip(src, tgt, text.docs):
        if not len(s) or not len(t):
            out.no_pieces += 1
        elif len(s) > max_pieces or len(t) > max_pieces:
            out.too_long += 1
        else:
            out.src.append(s)
            out.tgt.append(t)
            out.docs.append(d)
    return out


def run_aligner(opts: ParallelOptions, src: list[np.ndarray], tgt: list[np.ndarray]) -> tuple[Direction, Direction,
                                                                                             dict]:
    if opts.aligner == "eflomal":
        from data_tools.pairs.align_eflomal import align_with_eflomal
        t2s, s2t = align_with_eflomal(src, tgt)
        record = {"name": "eflomal", "program": "eflomal-align (external, GPL-3)"}
    else:
        t2s, s2t = align_both(src, tgt, opts.align)
        record = {"name": "fast_align", "implementation": "data_tools.pairs.align (numpy)",
                  "config": dataclasses.asdict(opts.align)}
    for name, d in (("t2s", t2s), ("s2t", s2t)):
        record[name] = {"tension": d.tension, "log_likelihood_per_piece": d.log_likelihood}
    return t2s, s2t, record


def _copy_target_model(path: Path, out: Path) -> Path:
    dest = out / path.name
    if not dest.exists() or not dest.samefile(path):
        tmp = dest.with_name(f"{dest.name}.tmp")
        shutil.copyfile(path, tmp)
        tmp.replace(dest)
    return dest


def build_parallel(opts: ParallelOptions) -> dict:
    """Every step; returns the statistics (with per-step seconds) and the manifest path."""
    opts.validate()
    if opts.aligner == "eflomal":
        from data_tools.pairs.align_eflomal import find_eflomal
        find_eflomal()  # fail before the slow steps
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    text = read_parallel(opts.input)
    source, target = SourceTokenizer(opts.source_tokenizer), TargetTokenizer(opts.target_tokenizer)
    seconds["read"] = time.perf_counter() - t
    log(f"read {len(text)} pairs ({text.empty_dropped} with an empty side dropped) and loaded both tokenizers in "
        f"{seconds['read']:.1f} s", "parallel")
    t = time.perf_counter()
    tok = tokenize_pairs(text, source, target, opts.max_pieces)
    seconds["tokenize"] = time.perf_counter() - t
    if not tok.src:
        raise PrepareError(f"no pairs left after tokenisation ({tok.no_pieces} without pieces on a side, "
                           f"{tok.too_long} over --max-pieces {opts.max_pieces})")
    log(f"tokenised in {seconds['tokenize']:.1f} s: {len(tok.src)} pairs, {sum(map(len, tok.src))} source and "
        f"{sum(map(len, tok.tgt))} target pieces ({tok.no_pieces} without pieces, {tok.too_long} too long "
        "dropped)", "parallel")
    if target.encoder.specials:
        log(f"{target.encoder.specials} special token(s) spelled out in the target text (a literal \"<mask>\" or "
            "\"</s>\") became unk: shards hold no special ids", "parallel")
    t2s, s2t, aligner = run_aligner(opts, tok.src, tok.tgt)
    seconds["align_t2s"], seconds["align_s2t"] = t2s.seconds, s2t.seconds
    timing = (f"{t2s.seconds:.1f} s (t2s) + {s2t.seconds:.1f} s (s2t)" if opts.aligner == "fast_align"
              else f"{t2s.seconds:.1f} s (one {opts.aligner} run)")
    log(f"aligned in {timing}: {t2s.n_links} t2s links, {s2t.n_links} s2t links", "parallel")
    t = time.perf_counter()
    corpus = AlignedCorpus(tok.src, tok.tgt, s2t.links, t2s.links, tok.docs)
    provenance = {"input": {"lines": text.lines, "empty_dropped": text.empty_dropped,
                            "no_pieces_dropped": tok.no_pieces, "too_long_dropped": tok.too_long,
                            "max_pieces": opts.max_pieces, "pairs": len(tok.src), "documents": len(set(tok.docs)),
                            "split": dataclasses.asdict(opts.shards)},
                  "aligner": aligner}
    path, manifest = write_outputs(opts, corpus, source, target, provenance)
    seconds["write"] = time.perf_counter() - t
    log(f"wrote {sum(len(s['shards']) for s in manifest['splits'].values())} shards, "
        f"{manifest['dictionary']['entries']} dictionary entries in {seconds['write']:.1f} s -> {path}", "parallel")
    return {"manifest": str(path), "seconds": seconds, **manifest}


def write_outputs(opts: ParallelOptions, corpus: AlignedCorpus, source: SourceTokenizer, target: TargetTokenizer,
                  provenance: dict) -> tuple[Path, dict]:
    """Shards, dictionary.tsv (train links only), the target model and, last, manifest.json."""
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "manifest.json"  # an earlier run's stays while its files do (write_parallel_shard retires it)
    dtypes = corpus.dtypes(source.vocab_size, target.vocab_size)
    assignment = corpus.split(opts.shards)
    splits = {name: write_split(out, name, corpus, pairs, dtypes, opts.shards.shard_pairs)
              for name, pairs in assignment.items()}
    train = assignment["train"]
    counts = count_links([corpus.src[k] for k in train], [corpus.tgt[k] for k in train],
                         [corpus.s2t[k] for k in train], [corpus.t2s[k] for k in train], source.vocab_size)
    path.unlink(missing_ok=True)  # the shards are this run's: a run cut short leaves no manifest that disagrees
    dictionary = write_dictionary(out / DICTIONARY, counts, opts.dictionary_min_count, target.pieces, source.pieces)
    model = _copy_target_model(Path(opts.target_tokenizer), out)
    files = [name for s in splits.values() for name in s["shards"]] + [DICTIONARY, model.name]
    manifest = {"kind": "parallel", "format_version": PARALLEL_FORMAT_VERSION,
                "source_tokenizer": source.describe(), "target_tokenizer": target.describe(),
                "dtypes": {k: v.name for k, v in dtypes.items()}, "splits": splits, **provenance,
                "dictionary": dictionary, "files": {name: sha256_file(out / name) for name in files}}
    atomic_write_text(path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return path, manifest
