"""A source decoder's tokenizer extended with target-language pieces (``model.method: extend``, issue 56).

    xpt-data extend-vocab --source SRC --text uk.txt [...] --out DIR [--add 8000] [--english en.txt ...]

SRC is a model directory, a hub id or a ``.gguf`` file. The target pieces are learned from ``--text`` (UTF-8, one
document or sentence per line): for a byte-level BPE source (GPT-2, Llama 3, Qwen, SmolLM2) as new merges after
the source's (``data_tools.vocab_merge.bpe``), for a SentencePiece source (Llama 2, Mistral, Gemma) as pieces of a
target SentencePiece model appended to the source's (``data_tools.vocab_merge.sentencepiece``). By default only
pieces with a non-ASCII character are added, so English text keeps its ids; ``--allow-ascii`` lifts that.

DIR gets a tokenizer that ``AutoTokenizer.from_pretrained(DIR)`` loads (and ``tokenizer.model`` for a
SentencePiece source), plus ``extend_vocab.json``. Ids 0..source_size-1 are the source's, the new pieces follow
contiguously, and a ``<pad>`` is added last when the source has no pad distinct from eos (``pad_added``). The
fertility table (pieces per whitespace word, UTF-8 bytes per piece, before and after) covers the target text and
the ``--english`` text; the run also checks that every line round-trips and that English (or a built-in ASCII
sample) keeps its ids. Same inputs, same bytes out.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from data_tools.errors import ArgumentParser, cli_errors
from data_tools.typed_options import as_invoked, positive_int
from data_tools.vocab_merge.extend import DEFAULT_ADD, extend_vocab
from data_tools.vocab_merge.fertility import table


def main(argv: list[str] | None = None, prog: str = "xpt-data extend-vocab") -> int:
    p = ArgumentParser(prog=prog, description=as_invoked(__doc__, prog),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", required=True, help="the source model: a directory, a hub id or a .gguf file")
    p.add_argument("--text", required=True, nargs="+", type=Path, metavar="FILE",
                   help="target-language text, UTF-8, one document or sentence per line")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder for the extended tokenizer")
    p.add_argument("--add", type=positive_int, default=DEFAULT_ADD, metavar="N",
                   help="add at most this many new pieces (default %(default)s)")
    p.add_argument("--english", nargs="+", type=Path, metavar="FILE",
                   help="English text: fertility before/after and the check that its ids are unchanged")
    p.add_argument("--allow-ascii", action="store_true",
                   help="also add pieces made of ASCII only (English text may then tokenize differently)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    with cli_errors(a.out):
        r = extend_vocab(a.source, a.text, a.out, a.add, a.english, a.allow_ascii)
    ids = f" (ids {r['first_new_id']}..{r['first_new_id'] + r['added'] - 1})" if r["added"] else \
        " (the text has no piece the source lacks" + ("" if a.allow_ascii else " that is not pure ASCII") + ")"
    pad = f" + pad {r['pad_token']!r} (id {r['pad_token_id']})" if r["pad_added"] else ""
    print(f"{a.out}: {r['kind']} source of {r['source_size']} tokens + {r['added']} new pieces{ids}{pad} in "
          f"{time.perf_counter() - t0:.1f}s")
    print(table(r["fertility"]))
    if r["fertility"]["english"] is None:
        print(r["fertility"]["english_note"])
    print(f"English ids unchanged ({r['english_ids_checked_on']}): {r['english_ids_unchanged']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m data_tools.cli.extend_vocab"))
