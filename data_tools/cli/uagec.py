"""UA-GEC (Ukrainian grammatical error correction corpus, PyPI ``ua-gec==2.1.3``) -> plain text for ``prepare``.

    pip install --no-deps ua-gec==2.1.3
    python -m data_tools.cli.uagec --out data/uagec [--layer gec-fluency|gec-only] [--skip-sensitive]
    python -m data_tools.cli.prepare --input data/uagec/text/train.txt --out data/uk ...

What is read and written: ``data_tools.corpora.uagec``. ``text/{train,test}.txt`` hold the corrected text
(pretrain on ``text/train.txt`` only when the model will be evaluated on UA-GEC's test partition),
``partition.json`` the package's train/test partition, ``labels/{train,test}.jsonl`` one line per original
sentence with label 1 when the annotator changed it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from data_tools.corpora.uagec import LAYERS, export
from data_tools.typed_options import as_invoked
from data_tools.errors import ArgumentParser, cli_errors


def main(argv: list[str] | None = None, prog: str = "xpt-data uagec") -> int:
    p = ArgumentParser(prog=prog, description=as_invoked(__doc__, prog),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--layer", default="gec-fluency", choices=LAYERS,
                   help="annotation layer: grammar+fluency corrections (default) or grammar only")
    p.add_argument("--data-dir", type=Path, help="ua_gec/data directory (default: the installed package's)")
    p.add_argument("--skip-sensitive", action="store_true", help="drop documents marked is_sensitive")
    p.add_argument("--no-labels", dest="labels", action="store_false", help="do not write labels/*.jsonl")
    a = p.parse_args(argv)
    with cli_errors():
        stats = export(a.out, a.data_dir, a.layer, a.skip_sensitive, a.labels)
    print(json.dumps(stats), file=sys.stderr)
    print(a.out / "text")
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m data_tools.cli.uagec"))
