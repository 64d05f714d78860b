"""What a vocabulary extension bought and what it kept: fertility (pieces per whitespace word, UTF-8 bytes per
piece) before and after, round trips (decode(encode(line)) == line) and the lines whose ids changed."""
from __future__ import annotations

BATCH = 1000
# Checked even without --english: ASCII text must keep its ids under the default filter.
ASCII_PROBE = [
    "The quick brown fox jumps over the lazy dog.",
    "def main(argv: list[str] | None = None) -> int:  # returns 0 on success",
    "Pack my box with five dozen liquor jugs! 1234567890 + 3.14159 = ?",
    "  leading spaces, trailing tabs\t and <html> tags; e-mail: someone@example.com",
]


def encode(tok, lines: list[str]) -> list[list[int]]:
    ids: list[list[int]] = []
    for i in range(0, len(lines), BATCH):
        ids.extend(tok(lines[i:i + BATCH], add_special_tokens=False)["input_ids"])
    return ids


def fertility(lines: list[str], ids: list[list[int]]) -> dict:
    words = sum(len(line.split()) for line in lines)
    nbytes = sum(len(line.encode("utf-8")) for line in lines)
    pieces = sum(map(len, ids))
    return {"lines": len(lines), "words": words, "bytes": nbytes, "pieces": pieces,
            "pieces_per_word": round(pieces / max(words, 1), 4), "bytes_per_piece": round(nbytes / max(pieces, 1), 4)}


def round_trip_failures(tok, lines: list[str], ids: list[list[int]]) -> list[int]:
    """Indices of the lines that do not decode back to themselves."""
    decoded = tok.batch_decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return [i for i, (line, text) in enumerate(zip(lines, decoded)) if line != text]


def compare(source_tok, merged_tok, lines: list[str], first_new: int) -> dict:
    """Before/after fertility of ``lines``, their round trips under both tokenizers, the lines whose ids changed
    and how many new-piece ids the merged tokenizer used."""
    before, after = encode(source_tok, lines), encode(merged_tok, lines)
    failed_before = round_trip_failures(source_tok, lines, before)
    failed_after = round_trip_failures(merged_tok, lines, after)
    return {"before": fertility(lines, before), "after": fertility(lines, after),
            "round_trip_failures": {"before": len(failed_before), "after": len(failed_after)},
            "round_trip_failed_examples": [lines[i][:200] for i in failed_after[:3]],
            "lines_with_changed_ids": sum(a != b for a, b in zip(before, after)),
            "new_piece_occurrences": sum(i >= first_new for row in after for i in row)}


def table(report: dict) -> str:
    """The fertility part of the report as a small text table."""
    rows = [("text", "tokenizer", "pieces/word", "bytes/piece", "lines changed", "round-trip fails")]
    for name in ("target", "english"):
        r = report.get(name)
        if r is None:
            continue
        for when in ("before", "after"):
            changed = str(r["lines_with_changed_ids"]) if when == "after" else ""
            rows.append((name, when, f"{r[when]['pieces_per_word']:.3f}", f"{r[when]['bytes_per_piece']:.3f}",
                         changed, str(r["round_trip_failures"][when])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
