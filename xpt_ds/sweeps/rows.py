"""A sweep's ``results.jsonl``: one JSON row per finished run (arm, size, seed), appended as each run finishes;
and the sweep's other JSON files, read with an error that names the file."""
from __future__ import annotations

import json
from pathlib import Path

from xpt_ds.errors import UserError

# A row's scores, as xpt_ds.sweeps.scoring reads them from xpt_ds.cli.evaluate's JSON: 002 Table 2's intrinsic metrics
# always, bits per character and per word when the shards carry text lengths.
INTRINSIC_KEYS = ("loss", "ppl", "hits@1", "hits@3", "hits@5", "hits@10", "mrr", "mr")
OPTIONAL_KEYS = ("bits_per_char", "bits_per_word")
# A row's ``text`` (--score-text): per label, these of xpt_ds.cli.evaluate --text's figures for the file.
TEXT_KEYS = ("bits_per_byte", "pieces_per_word", "tokens", "bytes")
PROBE_SUFFIX = "_probe"  # a row's text[LABEL_probe]: --probe-text's figures on LABEL's file (xpt_ds.cli.probe)


def read_json(path: Path):
    """``path``'s JSON; a file that does not parse is a UserError naming it."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e}); delete or repair it") from None


def row_key(r: dict) -> tuple[str, int, int | None]:
    return r["method"], r["size"], r.get("seed")


def read_rows(path: Path) -> dict[tuple[str, int, int | None], dict]:
    """The rows by run, the newest row of a run winning. A last line without its newline is a row still being
    appended (a report made while the sweep runs): left out, not an error."""
    rows = {}
    data = path.read_bytes() if path.is_file() else b""
    complete = data if data.endswith(b"\n") else data[:data.rfind(b"\n") + 1]
    for number, line in enumerate(complete.split(b"\n"), 1):  # at newlines only, as the rows are written
        if line.strip():
            try:
                r = json.loads(line.decode())
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise UserError(f"{path}:{number}: not a JSON row ({e}); delete or repair that line") from None
            if not (isinstance(r, dict) and isinstance(r.get("method"), str) and isinstance(r.get("size"), int)):
                raise UserError(f"{path}:{number}: not a row (a JSON object with its run's method and size); delete "
                                "or repair that line")
            rows[row_key(r)] = r
    return rows


def text_row(r: dict) -> dict:
    """A row's figures for one ``--score-text`` file from ``xpt_ds.cli.evaluate --text``'s JSON ``r`` of that one
    file (its ``text`` section holds the file alone)."""
    (figures,) = r["text"].values()
    return {k: figures[k] for k in TEXT_KEYS}


def downstream_row(r: dict) -> dict:
    """A row's fine-tuning keys from ``xpt_ds.cli.finetune``'s ``results.json`` ``r``: its headline metric's mean, its
    spread (none for one seed) and every seed's value. A seed whose training loss became NaN (``diverged``) has no
    score: it is left out and counted."""
    metric = r["config"]["metric"]
    scored = [s for s in r["seeds"] if "diverged" not in s]
    row = {"downstream_metric": metric, "downstream_mean": r["summary"][metric]["mean"],
           "downstream_std": r["summary"][metric]["std"] if len(scored) > 1 else None,
           "downstream_seeds": len(scored), "downstream_values": [s["test"][metric] for s in scored]}
    if len(scored) < len(r["seeds"]):
        row["downstream_diverged"] = len(r["seeds"]) - len(scored)
    if "majority_baseline" in r:
        row["majority_accuracy"] = r["majority_baseline"]["accuracy"]
    if "train_majority" in r:  # fine-tuned since 2026-11-28
        row["train_majority_accuracy"] = r["train_majority"]["accuracy"]
    return row
