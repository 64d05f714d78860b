"""Every option of the preparation pipeline with its one default, help, choices and flag: ``xpt-data prepare``'s
per-stage flags (``data_tools.cli.prepare``, through ``data_tools.typed_options``) and the stages' arguments both come
from ``PrepareOptions``. A field's ``group`` is the stage (or stages) whose subcommand takes its flag; field
order is the order of the flags in ``--help``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from data_tools.typed_options import option, parse_size, positive_int
from data_tools.pipeline.readers import DOC_BOUNDARIES, FORMATS
from data_tools.pipeline.spm.layouts import LAYOUTS, MODEL_TYPES
from data_tools.pipeline.text import NORMALIZE_FORMS


@dataclass(frozen=True)
class PrepareOptions:
    # reading and cleaning (stage clean)
    fmt: str = option("auto", "input format; auto detects it per file", FORMATS, flag="--format", group="clean")
    encoding: str = option("utf-8", "text encoding of every input file, decoded strictly (e.g. cp949 or euc-kr for "
                                     "older Korean text, cp1251 for Cyrillic)", metavar="NAME", group="clean")
    doc_boundary: str = option("blank", "text format: a blank line ends a document, each non-empty line is one "
                                        "(sentence-per-line corpora), or each file is one", DOC_BOUNDARIES,
                               group="clean")
    normalize: str = option("NFKC", "Unicode normalisation", NORMALIZE_FORMS, group="clean")
    splitter: str = option("default", "sentence splitter: 'default', 'none' (a line is a sentence) or "
                                      "MODULE:FUNCTION (str -> list[str])", group="clean")
    min_chars: int = option(2, "drop sentences shorter than this", group="clean")
    max_chars: int = option(2000, "drop sentences longer than this (0: no limit)", group="clean")
    dedupe: bool = option(True, "keep exact duplicate sentences (default: drop all but the first)", flag="--no-dedupe",
                          group="clean")
    # splitting by document (stage split)
    valid: int | float = option(0.05, "validation documents: a fraction (0.05) or a count (1000)", type=parse_size,
                                group="split")
    test: int | float = option(0.05, "test documents, like valid", type=parse_size, group="split")
    # SentencePiece (stage spm)
    vocab_size: int = option(50_000, "SentencePiece vocabulary size", type=positive_int, group="spm")
    family: str = option("roberta", "special-token layout of the source model family", tuple(sorted(LAYOUTS)),
                         group="spm")
    model_type: str = option("unigram", "SentencePiece model type", MODEL_TYPES, group="spm")
    spm_input_sentences: int = option(2_000_000, "train SentencePiece on a seeded sample of this many train "
                                                 "sentences (0: all)", group="spm")
    character_coverage: float = option(0.9995, "SentencePiece character coverage", group="spm")
    byte_fallback: bool = option(False, "spell a character the vocabulary lacks in UTF-8 byte pieces <0x00>..<0xFF> "
                                        "(256 of the vocabulary's pieces), as Llama-style tokenizers do, instead "
                                        "of <unk>: a decoder can then write every character", group="spm")
    spm_threads: int = option(8, "SentencePiece trainer threads: the model depends on it, so it is a fixed option, "
                                 "not the machine's core count", type=positive_int, group="spm")
    tokenizer: Path | None = option(None, "use this SentencePiece model instead of training one (with pad, bos, "
                                          "eos and unk ids; a mask piece for an encoder source)", type=Path,
                                    group="spm")
    # stages split and spm (after the spm fields, where ``prepare spm --help`` lists it)
    seed: int = option(0, "split and SentencePiece sampling seed", group=("split", "spm"))
    # shards (stage tokenize)
    shard_tokens: int | None = option(50_000_000, "target tokens per shard (whole documents)", type=positive_int,
                                      group="tokenize", exclusive="shard size")
    shard_docs: int | None = option(None, "documents per shard (instead of shard_tokens)", type=positive_int,
                                    group="tokenize", exclusive="shard size")
    hf_tokenizer: str | None = option(None, "tokenize with this Hugging Face tokenizer (a directory or hub id, e.g. "
                                            "the source model's) instead of SentencePiece; the spm stage is skipped",
                                      metavar="DIR_OR_ID", group="tokenize")

    def replace(self, **changes) -> PrepareOptions:
        return dataclasses.replace(self, **changes)


DEFAULTS = PrepareOptions()
