"""A source decoder's tokenizer extended with target-language pieces, written as one folder: ``extend_vocab``
builds DIR whole under DIR.tmp and moves it into place (``xpt-data extend-vocab`` is its command)."""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

from data_tools.errors import PrepareError
from data_tools.vocab_merge import bpe, sentencepiece
from data_tools.vocab_merge.fertility import ASCII_PROBE, compare
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
