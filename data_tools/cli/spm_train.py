"""Train a target SentencePiece model on one sentence per line, with the special-token layout of the source
model family (RoBERTa: <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>; BERT: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]).

    python -m data_tools.cli.spm_train --input sentences.txt --out spm/spm --vocab-size 8000 [--family bert]

Writes PREFIX.model and PREFIX.vocab. The model depends on ``--threads`` (SentencePiece's float sums), so it is
a fixed option, not the machine's core count.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_tools.typed_options import as_invoked
from data_tools.errors import ArgumentParser, cli_errors
from data_tools.pipeline.options import DEFAULTS
from data_tools.pipeline.spm.layouts import LAYOUTS, MODEL_TYPES
from data_tools.pipeline.spm.trainer import train_spm


def main(argv: list[str] | None = None, prog: str = "xpt-data spm-train") -> int:
    p = ArgumentParser(prog=prog, description=as_invoked(__doc__, prog),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, type=Path, help="one sentence per line")
    p.add_argument("--out", required=True, type=Path, help="output prefix (writes PREFIX.model/.vocab)")
    p.add_argument("--vocab-size", type=int, default=DEFAULTS.vocab_size,
                   help="pieces, the special ones included (default %(default)s)")
    p.add_argument("--family", default=DEFAULTS.family, choices=sorted(LAYOUTS),
                   help="the source model family whose special-token ids the model takes (default %(default)s)")
    p.add_argument("--model-type", default=DEFAULTS.model_type, choices=MODEL_TYPES,
                   help="SentencePiece's algorithm (default %(default)s)")
    p.add_argument("--threads", type=int, default=DEFAULTS.spm_threads,
                   help="SentencePiece's threads: the model depends on them, so keep them fixed (default %(default)s)")
    p.add_argument("--byte-fallback", action="store_true",
                   help="spell a character the vocabulary lacks in UTF-8 byte pieces instead of <unk>")
    a = p.parse_args(argv)
    with cli_errors():
        print(train_spm(a.input, a.out, a.vocab_size, a.family, a.model_type, num_threads=a.threads,
                        byte_fallback=a.byte_fallback))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m data_tools.cli.spm_train"))
