"""Replicates (``--seeds``) folded into one row per (arm, size) for the report: each metric's mean over the seeds,
its sample standard deviation as ``<key>_std`` and the count as ``seeds``. The downstream figure pools every
fine-tuning seed of every replicate, so its spread covers both sources of variance."""
from __future__ import annotations

import math
import statistics

from xpt_ds.sweeps.rows import INTRINSIC_KEYS, OPTIONAL_KEYS

# Averaged over replicates: a row's scores and the run facts. The report imports this module, not the other way.
AVERAGED = (*INTRINSIC_KEYS, *OPTIONAL_KEYS, "epochs", "train_seconds", "wall_seconds", "steps_done")
PER_RUN = ("run_dir", "train_args", "config_sha256", "checkpoint", "best")  # one replicate's: not in a folded row


def spread(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for one value)."""
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def aggregate(rows: list[dict]) -> list[dict]:
    """One row per (method, size), in first-seen order; a single unseeded row passes through unchanged."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["method"], r["size"]), []).append(r)
    out = []
    for group in groups.values():
        if len(group) == 1 and group[0].get("seed") is None:
            out.append(group[0])
            continue
        row = {**{k: v for k, v in group[0].items() if k not in PER_RUN}, "seeds": len(group),
               "seed": [r.get("seed") for r in group]}
        for key in AVERAGED:
            values = [r[key] for r in group if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
            if values:
                row[key], row[f"{key}_std"] = spread(values)
        if any(r.get("downstream_mean") is not None for r in group):
            pooled = [v for r in group for v in (r.get("downstream_values") or [r.get("downstream_mean")])
                      if v is not None]
            row["downstream_mean"], row["downstream_std"] = spread(pooled)
            row["downstream_values"], row["downstream_seeds"] = pooled, len(pooled)
            diverged = sum(r.get("downstream_diverged", 0) for r in group)
            if diverged:
                row["downstream_diverged"] = diverged
        out.append(row)
    return out
