"""The ``xpt-data`` command: one subcommand per entry point, each the ``main`` of its module, imported only when
run (so ``xpt-data --help`` is instant). ``python -m data_tools.cli.<name>`` (underscores for dashes) runs the same
``main``."""
from __future__ import annotations

import importlib
import sys

COMMANDS = {  # name -> (module, one line)
    "prepare": ("data_tools.cli.prepare", "raw text -> clean sentences -> splits -> SentencePiece -> shards (resumes)"),
    "spm-train": ("data_tools.cli.spm_train", "a SentencePiece model with a source family's special tokens, from text"),
    "spm-specials": ("data_tools.cli.spm_specials", "a pad and/or mask piece added to a SentencePiece model of your "
                                                    "own (no id changes)"),
    "uagec": ("data_tools.cli.uagec", "the UA-GEC corpus -> text for prepare, its train/test partition, sentence "
                                      "labels"),
    "bible": ("data_tools.cli.bible", "English-Ukrainian Bible verse pairs (BSB, Ohienko) -> line-aligned files"),
    "parallel": ("data_tools.cli.parallel", "sentence pairs -> aligned parallel shards + dictionary.tsv (TreLM, 004)"),
    "static-embeddings": ("data_tools.cli.static_embeddings", "word2vec or fastText (FOCUS) piece vectors, row = id"),
    "source-embeddings": ("data_tools.cli.source_embeddings", "a Hugging Face model's input embeddings as NAME.npy"),
    "extend-vocab": ("data_tools.cli.extend_vocab", "a source tokenizer + target-language pieces (model.method: "
                                                    "extend)"),
    "align-embeddings": ("data_tools.cli.align_embeddings", "map target embeddings onto a source space (Procrustes, "
                                                        "adversarial)"),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("xpt-ds")  # data_tools ships in the xpt-ds distribution and has no version of its own
    except PackageNotFoundError:
        return "(xpt-ds not installed)"


def usage(prog: str = "xpt-data") -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {line}" for name, (_, line) in COMMANDS.items())
    return (f"usage: {prog} COMMAND [ARGS ...]\n\n{prog}: corpora, parallel data and static embeddings for "
            f"xpt-ds (data_tools).\n\ncommands:\n{rows}\n\n'{prog} COMMAND --help' lists a command's options. "
            "Training: xpt-ds --help.")


def main(argv: list[str] | None = None, prog: str = "xpt-data") -> int:
    """``prog``: how the user ran this (``python -m data_tools`` from ``__main__``), for every usage line."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(prog), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"xpt-data {_version()}")
        return 0
    if argv[0] not in COMMANDS:
        print(f"error: unknown command '{argv[0]}'; valid: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:], prog=f"{prog} {argv[0]}")


if __name__ == "__main__":
    sys.exit(main())
