"""A sweep's ``results.jsonl``: one JSON row per finished run (arm, size, seed), appended as each run finishes."""
from __future__ import annotations

import json
from pathlib import Path


def row_key(r: dict) -> tuple[str, int, int | None]:
    return r["method"], r["size"], r.get("seed")


def read_rows(path: Path) -> dict[tuple[str, int, int | None], dict]:
    """The rows by run, the newest row of a run winning. A last line without its newline is a row still being
    appended (a report made while the sweep runs): left out, not an error."""
    rows = {}
    text = path.read_text() if path.is_file() else ""
    complete = text if text.endswith("\n") else text[:text.rfind("\n") + 1]
    for line in complete.splitlines():
        if line.strip():
            r = json.loads(line)
            rows[row_key(r)] = r
    return rows
