"""Input discovery and format readers: raw files -> documents as lists of paragraphs (strings).

Formats (auto-detected per file from its first non-blank line, or forced with ``fmt``):

* ``text``: one paragraph per line; a blank line ends a document (``doc_boundary='blank'``), each non-empty line
  is one (``'line'``: sentence-per-line corpora), or each file is one (``'file'``). Under ``'blank'`` a document
  past ``MAX_BLANK_DOC_CHARS`` stops the read with an error that suggests ``'line'``.
* ``wikiextractor``: WikiExtractor's default output, ``<doc id=.. url=.. title=..>`` ... ``</doc>`` blocks; the
  title line WikiExtractor repeats under the header is dropped.
* ``jsonl``: one JSON object per line with a ``"text"`` field (WikiExtractor ``--json``); paragraphs are the
  text's lines; a leading line equal to ``"title"`` is dropped.

Any of them may be gzip-, bzip2- or xz-compressed (detected from the magic bytes, whatever the suffix).
Lines are decoded strictly, as UTF-8 or the ``encoding`` given (one for every file: ``--encoding cp949`` for older
Korean text): an undecodable line raises ``PrepareError('FILE:LINE: invalid UTF-8 (...)')`` with the line number
in the decompressed stream (a NUL byte or a known binary magic makes it
``... looks like a binary file``). Lines are split on the byte 0x0a and decoded one by one, so an encoding must write
ASCII as ASCII and hold no state from line to line (``check_encoding``; UTF-16, UTF-32, ISO-2022-*, HZ and UTF-7
are refused).
"""
from __future__ import annotations

import bz2
import codecs
import gzip
import json
import lzma
import re
import zlib
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from data_tools.errors import PrepareError

FORMATS = ("auto", "text", "wikiextractor", "jsonl")
DOC_BOUNDARIES = ("blank", "line", "file")
# No real document reaches it; a sentence-per-line file without blank lines does, and was read whole (856 MB RSS for
# 100 MB) only for the split stage to fail with "too few documents: 1". Characters, counted as the lines are read.
MAX_BLANK_DOC_CHARS = 64 << 20
HEAD_BYTES = 8192  # what ``head_problem`` reads of every input before the clean stage reads any whole

_MAGIC = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open}
_DOC_OPEN = re.compile(r"<doc(?:\s[^>]*)?>\s*$")
_TITLE = re.compile(r"""\btitle=(?:"([^"]*)"|'([^']*)')""")
_BOM = "\ufeff"
_BINARY_MAGIC = {b"PK\x03\x04": "a zip archive (or .docx/.xlsx/.epub)", b"%PDF": "a PDF",
                 b"\x7fELF": "an ELF executable", b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image",
                 b"GIF8": "a GIF image", b"\xd0\xcf\x11\xe0": "an Office document (.doc/.xls)",
                 b"7z\xbc\xaf": "a 7-Zip archive", b"Rar!": "a RAR archive",
                 b"\x28\xb5\x2f\xfd": "a zstd-compressed file", b"PAR1": "a Parquet file",
                 b"SQLite format 3\x00": "an SQLite database"}
_STATEFUL = ("hz", "utf-7")  # and iso2022_*: a line's bytes mean nothing without the shifts before it
_OUTPUT_DIRS = ("sentences", ".prepare")  # what prepare writes below --out besides its top-level files


def expand_inputs(paths: list[Path | str], exclude: Path | None = None,
                  log: Callable[[str], None] | None = None) -> list[Path]:
    """Files as given; a directory stands for every non-hidden file below it (sorted, recursive), except what lies
    in ``exclude`` (prepare's --out, whose own files a rerun would otherwise read as text). Links below a
    directory to a directory, or to nothing, are not followed, and hidden files and folders are left out; ``log``
    names them."""
    out: list[Path] = []
    skip = exclude.resolve() if exclude is not None else None
    for p in map(Path, paths):
        if skip is not None:
            _check_not_output(p, skip, exclude)
        if p.is_dir():
            found, links, hidden = [], [], []
            inside = skip is not None and p.resolve() in skip.parents  # --out below this input folder
            for f in sorted(p.rglob("*")):
                if inside and (f.resolve() == skip or skip in f.resolve().parents):
                    continue
                parts = f.relative_to(p).parts
                if any(part.startswith(".") for part in parts):
                    if parts[-1].startswith(".") and not any(part.startswith(".") for part in parts[:-1]):
                        hidden.append(f)  # said once for a hidden folder, not for every file below it
                    continue
                if f.is_file():
                    found.append(f)
                elif f.is_symlink():
                    links.append(f)
            if hidden and log is not None:
                log(f"left out: {len(hidden)} hidden file(s) or folder(s), whose names start with '.' "
                    f"({', '.join(map(str, hidden[:3]))}{', ...' if len(hidden) > 3 else ''})")
            if links and log is not None:
                log(f"not followed: {len(links)} link(s) to a directory or to nothing ({', '.join(map(str, links[:3]))}"
                    f"{', ...' if len(links) > 3 else ''})")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise PrepareError(f"input not found: {p}")
    if not out:
        raise PrepareError(f"no input files in {', '.join(map(str, paths)) or '(nothing given)'}")
    return out


def _check_not_output(p: Path, out: Path, given: Path) -> None:
    """PrepareError for an input that is ``out`` (resolved; ``given`` as the user wrote it) or lies among the files
    prepare writes there: a re-run would read its own outputs (``sentences/*.jsonl``, ``spm.model``, shards) back
    as text. An ``out`` below an input folder is left out of it instead, and an input folder below ``out`` is
    read (its own name is no output)."""
    where = p.resolve()
    if where == out:
        raise PrepareError(f"--out {given} is the input folder {p}: a re-run would read its own outputs as text; "
                           "write to another folder (or to one below it)")
    if any(where == out / d or out / d in where.parents for d in _OUTPUT_DIRS):
        raise PrepareError(f"input {p} lies in --out {given}'s own output folder {where.relative_to(out).parts[0]}/: "
                           "prepare writes there; give the original text")


def open_binary(path: Path) -> BinaryIO:
    """The file's bytes, decompressed when it is gzip/bzip2/xz."""
    with open(path, "rb") as f:
        head = f.read(6)
    for magic, opener in _MAGIC.items():
        if head.startswith(magic):
            return opener(path, "rb")
    return open(path, "rb")


def check_encoding(encoding: str) -> str:
    """The codec's canonical name (``utf-8`` for ``utf-8-sig``: a leading BOM is dropped in any encoding);
    PrepareError for an unknown one, one that is not a text encoding, one that does not write ASCII as ASCII
    (lines are split on the byte 0x0a) or a stateful one (lines are decoded one by one)."""
    try:
        codec = codecs.lookup(encoding)
    except LookupError:
        raise PrepareError(f"--encoding {encoding}: unknown encoding (Python's codec names: utf-8, cp949, euc-kr, "
                           "cp1251, latin-1, ...)") from None
    name = codec.name
    if name == "utf-8-sig":
        return "utf-8"
    convert = f"convert the files to UTF-8 first (iconv -f {encoding} -t UTF-8)"
    if name.startswith("iso2022") or name in _STATEFUL:
        raise PrepareError(f"--encoding {encoding}: {name} is stateful (escape or shift sequences switch its "
                           f"character set for the text after them) and lines are decoded one by one; {convert}")
    try:
        ascii_as_ascii = "\n <doc>{}".encode(name, errors="replace") == b"\n <doc>{}"
    except (LookupError, UnicodeError, TypeError):  # rot13, base64, idna: codecs, but not for text files
        raise PrepareError(f"--encoding {encoding}: {name} is not an encoding of text files (Python's codec names: "
                           "utf-8, cp949, euc-kr, cp1251, latin-1, ...)") from None
    if not ascii_as_ascii:
        raise PrepareError(f"--encoding {encoding}: lines are split on the byte 0x0a, which {name} does not write "
                           f"for a newline; {convert}")
    return name


def _label(encoding: str) -> str:
    return "UTF-8" if encoding == "utf-8" else encoding


def _undecodable_hint(raw: bytes, head: bytes, encoding: str) -> str:
    """What to say after ``invalid UTF-8 (...)``: a binary file (a NUL byte in the line, or ``head``, the file's first
    bytes, a known magic) is no text in any encoding; otherwise, under UTF-8, another encoding may read it."""
    kind = next((name for magic, name in _BINARY_MAGIC.items() if head.startswith(magic)), None)
    if kind is not None:
        return f": this looks like a binary file ({kind}), not text; give text files only"
    if b"\x00" in raw:
        return ": this looks like a binary file (it holds NUL bytes), not text; give text files only"
    return " (text in another encoding: --encoding NAME)" if encoding == "utf-8" else ""


def _invalid(path: Path, lineno: int, raw: bytes, head: bytes, encoding: str, e: UnicodeDecodeError) -> str:
    return (f"{path}:{lineno}: invalid {_label(encoding)} (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
            f"{_undecodable_hint(raw, head, encoding)}")


def head_problem(path: Path, encoding: str = "utf-8") -> str | None:
    """Why ``path`` is no text file, from its first ``HEAD_BYTES`` (decompressed): a known binary magic, NUL bytes
    (valid UTF-8, but in no text: over 1 % of them, as UTF-16 has), a line that does not decode, a compressed file
    that does not decompress. None when its start reads as text. Cheap enough for every input before anything is
    cleaned."""
    try:
        with open_binary(path) as f:
            head = f.read(HEAD_BYTES)
    except (EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError) as e:
        return f"{path}: corrupt or truncated compressed file ({e})"
    except OSError as e:  # bz2 reports bad data as OSError
        return f"{path}: cannot read ({e})"
    kind = next((name for magic, name in _BINARY_MAGIC.items() if head.startswith(magic)), None)
    if kind is not None:
        return f"{path}: this looks like a binary file ({kind}), not text; give text files only"
    if head.count(b"\x00") * 100 > len(head):  # a stray NUL in scraped text stays the clean stage's (as before)
        lineno = head.count(b"\n", 0, head.index(b"\x00")) + 1
        return f"{path}:{lineno}: this looks like a binary file (it holds NUL bytes), not text; give text files only"
    lines = head.split(b"\n")
    for lineno, raw in enumerate(lines, 1):
        cut = lineno == len(lines) and len(head) == HEAD_BYTES  # may end inside a character
        try:
            codecs.getincrementaldecoder(encoding)().decode(raw, final=not cut)
        except UnicodeDecodeError as e:
            return _invalid(path, lineno, raw, head[:16], encoding, e)
    return None


def iter_lines(path: Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """(line number, decoded line without the newline); strict ``encoding`` (a ``check_encoding`` name), errors
    name the file and line."""
    head = b""
    try:
        with open_binary(path) as f:
            for lineno, raw in enumerate(f, 1):
                if lineno == 1:
                    head = raw[:16]
                try:
                    line = raw.decode(encoding)
                except UnicodeDecodeError as e:
                    raise PrepareError(_invalid(path, lineno, raw, head, encoding, e)) from None
                if lineno == 1 and line.startswith(_BOM):
                    line = line[1:]
                line = line.rstrip("\r\n")
                if "\r" in line:  # a lone CR ends a line too (classic Mac OS files): a whole file was one document
                    yield from ((lineno, part) for part in line.split("\r"))
                else:
                    yield lineno, line
    except (EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError) as e:
        raise PrepareError(f"{path}: corrupt or truncated compressed file ({e})") from None
    except OSError as e:  # bz2 reports bad data as OSError
        raise PrepareError(f"{path}: cannot read ({e})") from None


def detect_format(path: Path, encoding: str = "utf-8") -> str:
    """'wikiextractor', 'jsonl' or 'text' from the first non-blank line (decoded leniently: errors are
    reported by the real read, with their line number)."""
    try:
        with open_binary(path) as f:
            for raw in f:
                line = raw.decode(encoding, errors="replace").lstrip(_BOM).strip()
                if not line:
                    continue
                if _DOC_OPEN.match(line):
                    return "wikiextractor"
                if line.startswith("{"):
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        return "text"
                    # a JSON object: JSON lines, whatever its keys. Read as text, a dump whose field is not "text"
                    # ({"id": 0, "content": ...}, or a header line first) put its JSON syntax into the shards.
                    return "jsonl" if isinstance(obj, dict) else "text"
                return "text"
    except (EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError, OSError) as e:
        raise PrepareError(f"{path}: corrupt or truncated compressed file ({e})") from None
    return "text"


def _paragraphs(lines: list[str], title: str | None) -> list[str]:
    paras = [p for p in (line.strip() for line in lines) if p]
    if paras and title is not None and paras[0] == title.strip():
        paras = paras[1:]
    return paras


def _read_text(path: Path, doc_boundary: str, encoding: str) -> Iterator[list[str]]:
    current: list[str] = []
    chars = 0
    for lineno, line in iter_lines(path, encoding):
        line = line.strip()
        if doc_boundary == "line":
            if line:
                yield [line]
        elif line:
            current.append(line)
            chars += len(line)
            if doc_boundary == "blank" and chars > MAX_BLANK_DOC_CHARS:
                raise PrepareError(f"{path}:{lineno}: no blank line for {len(current)} lines ({chars:,} characters), "
                                   "one document so far (--doc-boundary blank): a sentence-per-line file? use "
                                   "--doc-boundary line (each line a document), or --doc-boundary file for whole "
                                   "files")
        elif doc_boundary == "blank" and current:
            yield current
            current, chars = [], 0
    if current:
        yield current


def _read_wikiextractor(path: Path, encoding: str) -> Iterator[list[str]]:
    body: list[str] | None = None
    title = None
    for lineno, line in iter_lines(path, encoding):
        stripped = line.strip()
        if body is None:
            if _DOC_OPEN.match(stripped):
                body, m = [], _TITLE.search(stripped)
                title = (m.group(1) if m.group(1) is not None else m.group(2)) if m else None
            elif stripped:
                raise PrepareError(f"{path}:{lineno}: text outside a <doc> block (is this WikiExtractor output? "
                                   "use --format text otherwise)")
        elif stripped == "</doc>":
            paras = _paragraphs(body, title)
            if paras:
                yield paras
            body = None
        elif _DOC_OPEN.match(stripped):
            raise PrepareError(f"{path}:{lineno}: <doc> inside another <doc> (missing </doc>)")
        else:
            body.append(line)
    if body is not None:  # a last block without </doc> (a cut-off file): keep what it has
        paras = _paragraphs(body, title)
        if paras:
            yield paras


def _read_jsonl(path: Path, encoding: str, field: str = "text") -> Iterator[list[str]]:
    for lineno, line in iter_lines(path, encoding):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise PrepareError(f"{path}:{lineno}: invalid JSON ({e.args[0] if e.args else e})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
            has = (f"its keys: {', '.join(map(str, list(obj)[:8]))}" if isinstance(obj, dict) and obj else
                   f"it holds {type(obj).__name__ if not isinstance(obj, dict) else 'no key'}")
            raise PrepareError(f'{path}:{lineno}: expected a JSON object with a string "{field}" field ({has}): '
                               f'JSON lines are read from their "{field}"; rename the field, or drop the line')
        title = obj.get("title")
        paras = _paragraphs(obj[field].split("\n"), title if isinstance(title, str) else None)
        if paras:
            yield paras


def read_documents(path: Path, fmt: str = "auto", doc_boundary: str = "blank", encoding: str = "utf-8"
                   ) -> Iterator[list[str]]:
    """Documents of one file, each a list of non-empty paragraphs (stripped, not yet normalised)."""
    if fmt not in FORMATS:
        raise PrepareError(f"unknown format '{fmt}' (valid: {', '.join(FORMATS)})")
    if doc_boundary not in DOC_BOUNDARIES:
        raise PrepareError(f"unknown doc boundary '{doc_boundary}' (valid: {', '.join(DOC_BOUNDARIES)})")
    encoding = check_encoding(encoding)
    if fmt == "auto":
        fmt = detect_format(path, encoding)
    if fmt == "text":
        return _read_text(path, doc_boundary, encoding)
    if fmt == "wikiextractor":
        return _read_wikiextractor(path, encoding)
    return _read_jsonl(path, encoding)
