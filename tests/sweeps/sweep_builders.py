"""What the sweep tests share: ``result_rows``, the rows of a sweep's results.jsonl."""
from __future__ import annotations

import json


def result_rows(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
