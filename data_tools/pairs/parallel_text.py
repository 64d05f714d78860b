"""Sentence-aligned text -> (source, target, document id) triples: two line-aligned files or one TSV.

A pair with an empty side is dropped and counted (an aligner cannot place pieces against nothing). Without a
documents file every pair is its own document; with one (``--docs``, one id per input line, e.g. the Bible's
``chapters.txt``) the train/valid/test split keeps each document's pairs together.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from data_tools.errors import PrepareError


@dataclass(frozen=True)
class ParallelInput:
    """Where the pairs come from: ``source_file`` + ``target_file``, or ``tsv``."""
    source_file: Path | None = None
    target_file: Path | None = None
    tsv: Path | None = None
    tsv_header: bool = False
    """the TSV's first line names the columns and is skipped"""
    docs_file: Path | None = None
    """one document id per input line (per data line of the TSV); default: each pair is a document"""


@dataclass
class ParallelText:
    source: list[str] = field(default_factory=list)
    target: list[str] = field(default_factory=list)
    docs: list[str] = field(default_factory=list)
    lines: int = 0
    empty_dropped: int = 0

    def add(self, source: str, target: str, doc: str) -> None:
        self.lines += 1
        source, target = source.strip(), target.strip()
        if not source or not target:
            self.empty_dropped += 1
            return
        self.source.append(source)
        self.target.append(target)
        self.docs.append(doc)

    def __len__(self) -> int:
        return len(self.source)


def read_lines(path: Path) -> list[str]:
    """Lines split on ``\\n`` only: ``str.splitlines`` would also split on U+2028, U+0085 and friends, which
    can occur inside a sentence and would shift one side against the other."""
    path = Path(path)
    if not path.is_file():
        raise PrepareError(f"{path}: no such file")
    lines = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError:
                raise PrepareError(f"{path}:{number}: invalid UTF-8") from None
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    return lines


def _docs(inp: ParallelInput, n: int, counted: str) -> list[str]:
    if inp.docs_file is None:
        return [str(i) for i in range(n)]
    docs = read_lines(inp.docs_file)
    if len(docs) != n:
        raise PrepareError(f"{inp.docs_file} has {len(docs)} lines but {counted} has {n}; the documents file "
                           "needs one id per pair")
    return [d.strip() for d in docs]


def read_line_aligned(inp: ParallelInput) -> ParallelText:
    src, tgt = read_lines(inp.source_file), read_lines(inp.target_file)
    if len(src) != len(tgt):
        raise PrepareError(f"{inp.source_file} has {len(src)} lines but {inp.target_file} has {len(tgt)}; "
                           "line-aligned files need equal line counts")
    text = ParallelText()
    for s, t, d in zip(src, tgt, _docs(inp, len(src), str(inp.source_file))):
        text.add(s, t, d)
    return text


def read_tsv(inp: ParallelInput) -> ParallelText:
    """Two tab-separated columns, source then target. Not read as CSV: quotes are text here."""
    lines = read_lines(inp.tsv)
    first = 1 if inp.tsv_header else 0
    rows = []
    for number, line in enumerate(lines[first:], first + 1):
        cols = line.split("\t")
        if len(cols) != 2:
            if not line.strip():
                cols = ["", ""]
            else:
                raise PrepareError(f"{inp.tsv}:{number}: expected 2 tab-separated columns (source, target), "
                                   f"found {len(cols)}")
        rows.append(cols)
    text = ParallelText()
    for (s, t), d in zip(rows, _docs(inp, len(rows), f"{inp.tsv} (data lines)")):
        text.add(s, t, d)
    return text


def read_parallel(inp: ParallelInput) -> ParallelText:
    if (inp.tsv is None) == (inp.source_file is None and inp.target_file is None):
        raise PrepareError("give either --source-file and --target-file, or --tsv")
    if inp.tsv is None and (inp.source_file is None or inp.target_file is None):
        raise PrepareError("--source-file and --target-file go together")
    text = read_tsv(inp) if inp.tsv is not None else read_line_aligned(inp)
    if not len(text):
        where = inp.tsv if inp.tsv is not None else f"{inp.source_file} / {inp.target_file}"
        raise PrepareError(f"{where}: no sentence pairs ({text.lines} lines, {text.empty_dropped} with an empty "
                           "side)")
    return text
