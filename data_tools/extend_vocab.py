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
import copy
import json
import shutil
import sys
import time
from pathlib import Path

from data_tools.cli_options import as_invoked, positive_int
from data_tools.errors import PrepareError, cli_errors
from data_tools.vocab_merge import bpe, sentencepiece
from data_tools.vocab_merge.fertility import ASCII_PROBE, compare, table
from data_tools.vocab_merge.source import Source, load_source, read_lines

DEFAULT_ADD = 8000
EXAMPLES = 12
PAD_NAMES = ("<pad>", "<|pad|>", "[PAD]", "<extend_vocab_pad>")  # the first one the vocabulary lacks


def extend_vocab(source: str, texts: list[Path], out: Path, add: int = DEFAULT_ADD,
                 english: list[Path] | None = None, allow_ascii: bool = False) -> dict:
    """Build DIR (written whole under DIR.tmp, then moved into place) and return extend_vocab.json's content."""
    out = Path(out)
    lines = read_lines(texts, "--text")
    english_lines = read_lines(english, "--english") if english else None
    tmp = _fresh_dir(out)
    try:
        report = _build(source, lines, english_lines, tmp, add, allow_ascii)
        report.update(text_files=[str(f) for f in texts], english_files=[str(f) for f in english or []])
        (tmp / "extend_vocab.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n",
                                               encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)  # _fresh_dir allowed only an empty folder or an earlier extend-vocab output
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report


def _build(source: str, lines: list[str], english: list[str] | None, tmp: Path, add: int, allow_ascii: bool) -> dict:
    src = load_source(source)
    if src.kind == "byte_level_bpe":
        backend, pieces = bpe.extend(src, lines, add, allow_ascii)
    else:
        backend, pieces = sentencepiece.extend(src, lines, add, allow_ascii, tmp)
    pad_added = _save(src, backend, tmp)
    merged = _reload(src, tmp, pieces, pad_added)
    report = {"source": source, "kind": src.kind, "source_size": src.size, "added": len(pieces),
              "first_new_id": src.size, "requested": add, "size": len(merged), "pad_added": pad_added,
              "pad_token": merged.pad_token, "pad_token_id": merged.pad_token_id,
              **{f"{k}_token": getattr(merged, f"{k}_token") for k in ("bos", "eos", "unk")},
              "allow_ascii": allow_ascii, "examples": pieces[:EXAMPLES],
              "examples_text": [merged.convert_tokens_to_string([p]) for p in pieces[:EXAMPLES]]}
    target = compare(src.tok, merged, lines, src.size)
    probe = compare(src.tok, merged, ASCII_PROBE, src.size)
    eng = compare(src.tok, merged, english, src.size) if english else None
    report["fertility"] = {"target": target, "english": eng,
                           "english_note": None if eng else "no --english given: English fertility skipped"}
    report["ascii_probe_ids_unchanged"] = probe["lines_with_changed_ids"] == 0
    report["english_ids_unchanged"] = (eng or probe)["lines_with_changed_ids"] == 0
    report["english_ids_checked_on"] = "--english" if eng else f"a built-in ASCII sample ({len(ASCII_PROBE)} lines)"
    if src.kind == "sentencepiece":  # the pad, when added, is an added token of tokenizer.json only
        report["tokenizer_model_pieces"] = src.size + len(pieces)
        report["sentencepiece_agreement"] = sentencepiece.agreement(tmp / "tokenizer.model", merged, lines)
    return report


def _fresh_dir(out: Path) -> Path:
    if out.is_file() or out.is_dir() and any(out.iterdir()) and not (out / "extend_vocab.json").is_file():
        raise PrepareError(f"--out {out} exists and holds files extend-vocab did not write; give a new or empty "
                           "folder (or an earlier extend-vocab output, which is replaced)")
    tmp = out.resolve().with_name(out.resolve().name + ".tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # an earlier run that failed
        tmp.mkdir()
    except OSError as e:
        raise PrepareError(f"--out {out}: cannot write there ({e.strerror or e})") from None
    return tmp


def _save(src: Source, backend: dict, out: Path) -> bool:
    """Save the source's tokenizer with the extended backend under ``out``; add a pad after the new pieces when
    the source has none distinct from eos (the trainer needs one: a pad that is eos cannot be told from a
    document end). Returns whether a pad was added."""
    from tokenizers import Tokenizer
    merged = copy.deepcopy(src.tok)
    merged._tokenizer = Tokenizer.from_str(json.dumps(backend))  # the class, its settings and specials stay
    pad_added = src.tok.pad_token is None or src.tok.pad_token_id == src.tok.eos_token_id
    if pad_added:
        vocab = merged.get_vocab()
        merged.add_special_tokens({"pad_token": next(n for n in PAD_NAMES if n not in vocab)})
    merged.save_pretrained(str(out))
    return pad_added


def _reload(src: Source, out: Path, pieces: list[str], pad_added: bool):
    """DIR as stock transformers loads it, checked id for id against the source and the new pieces."""
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(str(out), trust_remote_code=False)
    vocab = tok.get_vocab()
    moved = [t for t, i in src.tok.get_vocab().items() if vocab.get(t) != i]
    lost = [p for i, p in enumerate(pieces) if vocab.get(p) != src.size + i]
    size = src.size + len(pieces) + pad_added
    if moved or lost or len(tok) != size or (pad_added and tok.pad_token_id != size - 1):
        raise PrepareError(f"the saved tokenizer in {out} does not reload as built ({len(moved)} source token(s) "
                           f"moved, {len(lost)} new piece(s) lost, size {len(tok)} != {size}); please report this")
    if not hasattr(tok, "backend_tokenizer"):
        raise PrepareError(f"transformers reloads {out} as a {type(tok).__name__}, not a fast tokenizer")
    return tok


def main(argv: list[str] | None = None, prog: str = "xpt-data extend-vocab") -> int:
    p = argparse.ArgumentParser(prog=prog, description=as_invoked(__doc__, prog),
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
    sys.exit(main(prog="python -m data_tools.extend_vocab"))
