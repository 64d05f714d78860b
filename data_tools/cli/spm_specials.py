"""Add a pad and/or a mask piece to a SentencePiece model of your own, after its last piece (every id it had stays,
so text encodes as before): SentencePiece's defaults, as Llama-style tokenizers are trained, have no pad, which
training needs, and no mask piece, which an encoder source's masked LM needs.

    python -m data_tools.cli.spm_specials --tokenizer tokenizer.model --out mine.model --pad "<pad>" [--mask "<mask>"]

Then `prepare --tokenizer mine.model` tokenizes a corpus with it, and a run's model.tokenizer names it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_tools.errors import ArgumentParser, cli_errors
from data_tools.pipeline.spm.specials import add_specials
from data_tools.typed_options import as_invoked


def main(argv: list[str] | None = None, prog: str = "xpt-data spm-specials") -> int:
    p = ArgumentParser(prog=prog, description=as_invoked(__doc__, prog),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", required=True, type=Path, help="the SentencePiece model (it is not changed)")
    p.add_argument("--out", required=True, type=Path, help="the model with the pieces added")
    p.add_argument("--pad", help="a pad piece, e.g. '<pad>': a control piece, the model's pad_id")
    p.add_argument("--mask", help="a mask piece, e.g. '<mask>': a user-defined piece")
    a = p.parse_args(argv)
    with cli_errors():
        if a.out.exists() and a.out.resolve() == a.tokenizer.resolve():
            p.error("--out is --tokenizer: write the new model beside it")
        ids = add_specials(a.tokenizer, a.out, a.pad, a.mask)
        print(f"{a.out}: " + ", ".join(f"{name} {piece!r} id {ids[name]}"
                                       for name, piece in (("pad", a.pad), ("mask", a.mask)) if name in ids))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m data_tools.cli.spm_specials"))
