"""Every option of the preparation pipeline, with its one default and its help: the CLI's flags
(``data_tools.prepare``) and the stages' arguments both come from ``PrepareOptions``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path


def _opt(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class PrepareOptions:
    # reading and cleaning (stage clean)
    fmt: str = _opt("auto", "input format; auto detects it per file")
    doc_boundary: str = _opt("blank", "text format: a blank line ends a document, or each file is one document")
    normalize: str = _opt("NFKC", "Unicode normalisation")
    splitter: str = _opt("default", "sentence splitter: 'default', 'none' (a line is a sentence) or MODULE:FUNCTION "
                                    "(str -> list[str])")
    min_chars: int = _opt(2, "drop sentences shorter than this")
    max_chars: int = _opt(2000, "drop sentences longer than this (0: no limit)")
    dedupe: bool = _opt(True, "drop all but the first of exact duplicate sentences")
    # splitting by document (stage split)
    valid: int | float = _opt(0.05, "validation documents: a fraction (0.05) or a count (1000)")
    test: int | float = _opt(0.05, "test documents, like valid")
    seed: int = _opt(0, "split and SentencePiece sampling seed")
    # SentencePiece (stage spm)
    vocab_size: int = _opt(50_000, "SentencePiece vocabulary size")
    family: str = _opt("roberta", "special-token layout of the source model family")
    model_type: str = _opt("unigram", "SentencePiece model type")
    spm_input_sentences: int = _opt(2_000_000, "train SentencePiece on a seeded sample of this many train "
                                               "sentences (0: all)")
    character_coverage: float = _opt(0.9995, "SentencePiece character coverage")
    spm_threads: int = _opt(8, "SentencePiece trainer threads: the model depends on it, so it is a fixed "
                               "option, not the machine's core count")
    tokenizer: Path | None = _opt(None, "use this SentencePiece model instead of training one")
    hf_tokenizer: str | None = _opt(None, "tokenize with this Hugging Face tokenizer (a directory or hub id, e.g. "
                                          "the source model's) instead of SentencePiece; the spm stage is skipped")
    # shards (stage tokenize)
    shard_tokens: int | None = _opt(50_000_000, "target tokens per shard (whole documents)")
    shard_docs: int | None = _opt(None, "documents per shard (instead of shard_tokens)")

    def replace(self, **changes) -> PrepareOptions:
        return dataclasses.replace(self, **changes)


DEFAULTS = PrepareOptions()


def help_of(name: str) -> str:
    """A field's help with its default, for the CLI."""
    f = {f.name: f for f in dataclasses.fields(PrepareOptions)}[name]
    return f"{f.metadata['help']} (default: {f.default})"
