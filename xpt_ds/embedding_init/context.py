"""What an embedding_init strategy works from and what it fills: ``InitContext`` (the target tokenizer, piece
counts, the source model's rows and tokenizer, a seeded generator, each loaded only when asked for) and
``Rows`` (the [target_vocab, hidden] matrix being built, what each row came from, and the report)."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from xpt_ds.config import ConfigError, DataConfig
from xpt_ds.data.tokenizer import TargetTokenizer
from xpt_ds.embedding_init.files import HF_TOKENIZER_FILES
from xpt_ds.errors import first_line

log = logging.getLogger(__name__)

KINDS = ("copied", "special", "combined", "fallback", "random", "zero")
EXAMPLES = 5  # per kind in the report


@dataclass
class InitContext:
    tok: TargetTokenizer
    source_embeddings: torch.Tensor  # float32 [source rows, hidden]: the source model's input embeddings
    source: str  # model.source: where the source tokenizer is
    generator: torch.Generator  # seeded with model.init_seed and the parameter's name
    std: float  # the source config's initializer_range
    args: dict  # model.embedding_init_args, checked and filled with defaults
    data: DataConfig | None = None  # the run's: ``counts`` are of data.train_shards, or of data.train_tokens' subset

    @property
    def hidden(self) -> int:
        return self.source_embeddings.shape[1]

    @cached_property
    def pieces(self) -> list[str]:
        return [self.tok.piece(i) for i in range(self.tok.vocab_size)]

    @cached_property
    def counts(self) -> np.ndarray:
        """int64 [target vocab]: occurrences of each id in ``data.train_shards``, or in the subset of them that
        ``data.train_tokens`` trains on (``count_pieces``)."""
        if self.data is None or not self.data.train_shards:
            raise ConfigError("config key 'data.train_shards' is empty; the embedding_init strategy counts pieces "
                              "in it")
        return count_pieces(list(self.data.train_shards), self.tok, self.data.on_corrupt_shard, self.data)[0]

    @cached_property
    def source_tokenizer(self):
        return load_source_tokenizer(self.source)


def count_pieces(shards: list[str], tok: TargetTokenizer, on_corrupt: str = "fail", data=None
                 ) -> tuple[np.ndarray, int, list[str]]:
    """(int64 [vocab] occurrences of each id, the documents counted, the shards skipped as corrupt under
    ``on_corrupt='skip'``) over ``shards``. ``data`` (a run's DataConfig) with ``train_tokens``: over the documents
    of that subset only, the last one cut where the stream cuts it (``xpt_ds.data.mlm.TokenStream``): a sweep's
    small sizes start their head bias and embeddings from the text they train on, not from the whole split."""
    from xpt_ds.data.manifest import expand_shards
    from xpt_ds.data.shards import DataError, DocReader, scan_shards
    if data is not None and getattr(data, "train_tokens", 0):
        return _count_subset(shards, tok, data)

    indexes, skipped = scan_shards(expand_shards(shards, tok), on_corrupt, vocab=(tok.vocab_size, tok.path),
                                   forbidden=tok.not_in_shards)
    counts = np.zeros(tok.vocab_size, np.int64)
    reader = DocReader(indexes)
    try:
        for s, ix in enumerate(indexes):
            if len(ix.lengths) == 0:
                continue
            ids = np.concatenate([reader.read(s, d) for d in range(len(ix.lengths))]).astype(np.int64)
            if ids.size and ids.max() >= tok.vocab_size:
                raise DataError(f"shard {ix.path} holds token id {ids.max()} >= vocab size {tok.vocab_size} of "
                                f"{tok.path}: it was made with another tokenizer")
            counts += np.bincount(ids, minlength=tok.vocab_size)
    finally:
        reader.close()
    return counts, sum(len(ix.lengths) for ix in indexes), skipped


def _count_subset(shards: list[str], tok: TargetTokenizer, data) -> tuple[np.ndarray, int, list[str]]:
    """``count_pieces`` over the documents the run's stream keeps for ``data.train_tokens``."""
    from xpt_ds.data.manifest import expand_shards, manifest_counts
    from xpt_ds.data.mlm import build_stream
    stream = build_stream(expand_shards(shards, tok), data, tok, data.train_tokens, manifest_counts(shards))
    try:
        counts = stream.piece_counts()
    finally:
        stream.reader.close()
    return counts, len(stream.epoch_docs), list(stream.skipped)


def load_source_tokenizer(source: str):
    """The source model's Hugging Face tokenizer; a directory without tokenizer files is a one-line error
    (transformers 5's AutoTokenizer would build an empty tokenizer of the model's class from no files)."""
    import transformers
    if source.endswith(".gguf") and Path(source).is_file():  # a GGUF source carries its tokenizer
        from xpt_ds.io.gguf_tokenizer import load_gguf_tokenizer
        return load_gguf_tokenizer(Path(source))
    if Path(source).is_dir() and not any((Path(source) / f).is_file() for f in HF_TOKENIZER_FILES):
        raise ConfigError(f"config key 'model.source': {source} has no tokenizer files "
                          f"({', '.join(HF_TOKENIZER_FILES[:3])}, ...), which model.embedding_init needs")
    try:
        return transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    except (OSError, ValueError, TypeError) as e:
        reason = first_line(e)
        raise ConfigError(f"config key 'model.source': {source} has no usable tokenizer, which model.embedding_init "
                          f"needs ({reason[:200]})") from None


class Rows:
    """The target matrix being built (float32 [vocab, hidden], zeros until set) and where each row came from."""

    def __init__(self, ctx: InitContext):
        self.ctx = ctx
        self.matrix = torch.zeros(ctx.tok.vocab_size, ctx.hidden, dtype=torch.float32)
        self.kind = np.full(ctx.tok.vocab_size, "", dtype=object)
        self.sources: dict[int, list] = {}  # row -> [source token, ...] or [[token, weight], ...]
        self.kind[ctx.tok.pad_id] = "zero"

    def unset(self) -> list[int]:
        return [i for i in range(len(self.kind)) if not self.kind[i]]

    def copy(self, i: int, source_id: int, token: str, kind: str = "copied") -> None:
        self.matrix[i] = self.ctx.source_embeddings[source_id]
        self.kind[i], self.sources[i] = kind, [token]

    def set(self, i: int, row: torch.Tensor, kind: str, sources: list | None = None) -> None:
        self.matrix[i] = row
        self.kind[i] = kind
        if sources is not None:
            self.sources[i] = sources

    def report(self, name: str, args: dict, kept: int = 0, **extra) -> dict:
        """Counts and examples of rows ``kept``.. : method extend keeps the source's rows 0..kept-1 as they are, so
        the strategy's work is the new rows alone (``kept_source_rows`` says how many were kept)."""
        counts = {k: int((self.kind[kept:] == k).sum()) for k in KINDS}
        examples = {k: [] for k in KINDS if counts[k] and k not in ("zero", "random")}
        for i in range(kept, len(self.kind)):
            k = self.kind[i]
            if k in examples and len(examples[k]) < EXAMPLES:
                examples[k].append({"id": i, "piece": self.ctx.tok.piece(i), "source": self.sources.get(i, [])})
        out = {"strategy": name, "args": args, "rows": len(self.kind) - kept, **counts, **extra, "examples": examples}
        return {**out, "kept_source_rows": kept} if kept else out


def kept_vocabulary_report(rows: int) -> dict:
    """The report of a method that keeps the source vocabulary (keep_vocab): every row is the source's."""
    return {"strategy": "source vocabulary kept", "args": {}, "rows": rows, "copied": rows, "examples": {}}


def summary(report: dict) -> str:
    """One log line."""
    counts = ", ".join(f"{report[k]} {k}" for k in KINDS if report.get(k))
    eg = next((e for k in ("copied", "combined") for e in report["examples"].get(k, [])[:1]), None)
    tail = f"; e.g. {eg['piece']!r} <- {eg['source'][:2]}" if eg else ""
    bias = f"; head bias {report['head_bias']}" if report.get("head_bias") else ""  # model.head_bias_init
    rows = (f"{report['rows']} new rows ({report['kept_source_rows']} source rows kept)"
            if report.get("kept_source_rows") else f"{report['rows']} rows")
    return f"embedding_init {report['strategy']}: {counts} of {rows}{tail}{bias}"


def log_report(report: dict | None, strategy: str, resumed_from: str | None, run_dir: Path) -> None:
    """Rank 0: log the report and write it to RUN_DIR/embedding_init.json. A resume does not run the strategy
    (the checkpoint overwrites the rows): ``report`` is then the first start's, which every checkpoint carries
    (None for one written before reports), and the line says the strategy was not run again."""
    again = f"not run again: the word embeddings come from checkpoint {resumed_from}"
    if report is None:
        log.info("embedding_init %s: %s (which records no report)", strategy, again)
        return
    log.info(summary(report) + (f" (the first start's report; {again})" if resumed_from is not None else ""))
    (run_dir / "embedding_init.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n",
                                                 encoding="utf-8")


