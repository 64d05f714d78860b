"""The source model's input-embedding matrix as ``OUT.npy`` + sidecar, the fixed side of an alignment.

    python -m data_tools.cli.source_embeddings --model MODEL_DIR_OR_HUB_ID --out emb/minilm_input

Row i is token id i (``data_tools.embeddings.source_model``). A model has no per-token counts, so aligners
rank its rows by id (use ``--source-first-row`` there to skip reserved rows, e.g. 1996 for BERT's uncased
vocabulary, whose ids 0-1995 are [PAD], [unused*], special tokens and single characters and whose words after
that come roughly by frequency).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_tools.embeddings.embedding_files import writable_prefix, write_embeddings
from data_tools.embeddings.source_model import input_embeddings
from data_tools.typed_options import as_invoked
from data_tools.errors import ArgumentParser, cli_errors


def main(argv: list[str] | None = None, prog: str = "xpt-data source-embeddings") -> int:
    p = ArgumentParser(prog=prog, description=as_invoked(__doc__, prog),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a Hugging Face model directory or hub id")
    p.add_argument("--out", required=True, type=Path, help="output prefix: writes OUT.npy and OUT.json")
    a = p.parse_args(argv)
    with cli_errors():
        out = writable_prefix(a.out)
        matrix, meta = input_embeddings(a.model)
        print(write_embeddings(out, matrix, meta).with_suffix(".npy"))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m data_tools.cli.source_embeddings"))
