"""Text cleaning and sentence splitting (pure functions, run inside the clean-stage worker processes).

The default splitter is language-agnostic and regex-based, tuned so Korean works: it cuts after sentence-final
punctuation (``. ! ? …``, the Arabic ``؟``, the Urdu ``۔``, the danda ``। ॥``, the Armenian ``։`` and the
Ethiopic ``። ፧``, with any closing quotes or brackets) followed by whitespace, after CJK full stops (``。 ！ ？``,
also ``! ?`` between kana or Han, which NFKC makes of the full-width ones) and Myanmar's ``။`` and Khmer's ``។``
without a space, and after a Korean final ending glued to the next sentence (``했다.그리고``). Text without
sentence punctuation (Thai) is not cut: a paragraph is one sentence there (``--splitter`` takes one). It does
not cut inside numbers (``3.14``, ``2010. 11. 12.``), after a short list of abbreviations (``Dr.``, ``e.g.``,
``вул.``), after single-letter initials (``J. R. R. Tolkien``, ``м. Київ``), after list labels at the start of
a paragraph (``1.``, ``IV.``, ``가.``), nor when the next word starts in lower case (``etc. and``).

Any callable ``str -> list[str]`` can replace it: ``--splitter module:function``; ``--splitter none`` keeps
each paragraph (input line) as one sentence.
"""
from __future__ import annotations

import importlib
import re
import unicodedata
from typing import Callable

from data_tools.errors import PrepareError

NORMALIZE_FORMS = ("NFKC", "NFC", "none")

_CLOSERS = "\"'”’»›」』）)]}"
_CLOSE = re.escape(_CLOSERS)
# Sentence ends of other scripts: Arabic question mark, Arabic/Urdu full stop, Devanagari/Bengali danda and double
# danda, Armenian full stop, Ethiopic full stop and question mark (whitespace follows, as after '.'); Myanmar's
# section mark and Khmer's khan, written without a space after (as CJK full stops)
_SPACED_ENDS = "\u061f\u06d4\u0964\u0965\u0589\u1362\u1367"
_UNSPACED_ENDS = "\u104b\u17d4\u17d5"
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"  # kana and Han
_CUT = re.compile(
    rf"[.!?…{_SPACED_ENDS}]+[{_CLOSE}]*(?=\s)"  # Latin-style end: whitespace follows
    rf"|[。！？{_UNSPACED_ENDS}]+[{_CLOSE}]*"  # CJK full stops need no space
    rf"|(?<=[{_CJK}])[!?]+[{_CLOSE}]*(?=[{_CJK}])"  # ！？ that NFKC made ASCII, between kana or Han
    rf"|(?<=[다요죠까네라])[.!?]+[{_CLOSE}]*(?=[가-힣])"  # Korean final ending glued to the next sentence
)
_OPEN = "\"'“‘«‹「『（([{"
_LIST_LABEL = re.compile(r"(?:\d{1,3}|[ivxlc]{1,5}|[IVXLC]{1,5}|[A-Za-z]|[가나다라마바사아자차카타파하])")
ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof sr jr st mt vs e.g i.e cf no nos fig figs vol vols pp ed eds approx dept inc ltd co corp
    gen gov sen rep rev lt col capt sgt jan feb mar apr jun jul aug sep sept oct nov dec
    ім вул просп пл обл смт проф акад доц д-р св див табл рис мал гр ул им
""".split())


_NEXT_CHAR = re.compile(r"\s*(\S?)")  # the first character after the whitespace that follows a cut


def _keep_together(text: str, start: int, m: re.Match) -> bool:
    """Whether the candidate cut at ``m`` is not a sentence end (abbreviation, number, initial, list label)."""
    punct = m.group().rstrip(_CLOSERS)
    nxt = _NEXT_CHAR.match(text, m.end()).group(1)  # not text[m.end():]: a copy per cut is quadratic in a long line
    if punct.startswith(".") and nxt.islower():  # "etc. and", "т.д. і", "wait... what"
        return True
    if punct != ".":
        return False
    cut = m.start()  # slices stay short: the text since the last cut grows over a run of kept cuts
    word = text[text.rfind(" ", start, cut) + 1 or start:cut].lstrip(_OPEN)
    if word[-1:].isdigit() and nxt.isdigit():  # "2010. 11. 12."
        return True
    if word.lower() in ABBREVIATIONS:
        return True
    if len(word) == 1 and (word.isupper() or word.islower()):  # cased single letter: an initial
        return True
    # "1. 서론", "IV. Results", "가. 목적": a label of at most 5 characters is all the text since the last cut
    return cut - start <= 256 and _LIST_LABEL.fullmatch(text[start:cut].strip()) is not None


def split_sentences(text: str) -> list[str]:
    """The default splitter: one paragraph -> its sentences (stripped, non-empty)."""
    out, start = [], 0
    for m in _CUT.finditer(text):
        if _keep_together(text, start, m):
            continue
        sentence = text[start:m.end()].strip()
        if sentence:
            out.append(sentence)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def no_split(text: str) -> list[str]:
    """``--splitter none``: the paragraph (input line) is the sentence."""
    return [text]


def load_splitter(spec: str | Callable[[str], list[str]] | None) -> Callable[[str], list[str]]:
    """'default', 'none', 'module:function' (dotted attribute paths allowed) or a callable."""
    if callable(spec):
        return spec
    if spec in (None, "", "default"):
        return split_sentences
    if spec == "none":
        return no_split
    module, _, attr = str(spec).partition(":")
    if not module or not attr:
        raise PrepareError(f"--splitter '{spec}': expected 'default', 'none' or MODULE:FUNCTION")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise PrepareError(f"--splitter '{spec}': cannot import {module} ({e})") from None
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise PrepareError(f"--splitter '{spec}': {module} has no attribute {attr}")
    if not callable(obj):
        raise PrepareError(f"--splitter '{spec}': {attr} is not callable")
    return obj


def splitter_name(spec) -> str:
    """A stable name for a splitter spec, for the clean stage's up-to-date check."""
    if callable(spec):
        return f"{getattr(spec, '__module__', '?')}:{getattr(spec, '__qualname__', repr(spec))}"
    return str(spec or "default")


# C0/C1 controls (tab and newline included) count as whitespace; BOM, zero-width space, soft hyphen and the
# invisible direction marks (LRM, RLM, the Arabic letter mark) go: SentencePiece's nmt_nfkc made each of those
# marks a space, which split a word of Arabic or Hebrew text in two.
_WS = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")
_INVISIBLE = re.compile("[\ufeff\u200b\u00ad\u200e\u200f\u061c]")


def clean_text(text: str, normalize: str = "NFKC") -> str:
    """Unicode normalisation (NFKC/NFC/none), controls removed, whitespace runs collapsed to one space."""
    if normalize not in NORMALIZE_FORMS:
        raise PrepareError(f"unknown normalization '{normalize}' (valid: {', '.join(NORMALIZE_FORMS)})")
    if normalize != "none":
        text = unicodedata.normalize(normalize, text)
    return _WS.sub(" ", _INVISIBLE.sub("", text)).strip()


def clean_document(paragraphs: list[str], splitter: Callable[[str], list[str]], normalize: str = "NFKC",
                   min_chars: int = 2, max_chars: int = 0) -> tuple[list[str], int, int]:
    """A document's sentences after normalisation, splitting and the length filters (``max_chars=0``: no upper
    limit), with the counts of sentences dropped as too short and too long. Dedupe happens later, in order."""
    out: list[str] = []
    short = long = 0
    trusted = splitter in (split_sentences, no_split)  # their pieces are already clean and stripped
    for para in paragraphs:
        para = clean_text(para, normalize)
        if not para:
            continue
        try:
            pieces = splitter(para)
        except Exception as e:  # the user's code: which splitter, on which text, and its own message
            msg = str(e).strip().splitlines()
            raise PrepareError(f"sentence splitter {splitter_name(splitter)} raised {type(e).__name__}"
                               f"{': ' + msg[0] if msg else ''} (on the paragraph {para[:60]!r})") from None
        if isinstance(pieces, str) or not isinstance(pieces, (list, tuple)):
            raise PrepareError(f"sentence splitter {splitter_name(splitter)} returned {type(pieces).__name__}, "
                               "expected a list of strings")
        for s in pieces:
            if not trusted:
                s = _WS.sub(" ", _INVISIBLE.sub("", s)).strip() if isinstance(s, str) else ""
            if not s:
                continue
            if len(s) < min_chars:
                short += 1
            elif max_chars and len(s) > max_chars:
                long += 1
            else:
                out.append(s)
    return out, short, long
