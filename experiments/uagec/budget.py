"""Seconds of ``launch/gpu_uagec.sh``'s time budget as the minutes the trainer and the sweep take.

    python -m experiments.uagec.budget SECONDS [--decimals N]

``guard.max_train_minutes`` from TRAIN_S (``SECONDS / 60`` as awk printed it: 6 significant digits, an integer
without a point) and ``xpt-ds sweep --deadline-minutes`` from the seconds left to start runs (``--decimals 2``).
"""
from __future__ import annotations

import argparse

from xpt_ds.errors import cli_errors


def minutes(seconds: float, decimals: int | None = None) -> str:
    """``seconds / 60``: with ``decimals``, fixed to that many places; else 6 significant digits, an integral value
    as an integer ('2.5', '2', '1.66667': what the script's awk printed)."""
    value = seconds / 60
    if decimals is not None:
        return f"{value:.{decimals}f}"
    return str(int(value)) if value == int(value) else f"{value:.6g}"


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.uagec.budget", description=__doc__.split("\n\n")[0])
    p.add_argument("seconds", type=float, help="seconds of the budget")
    p.add_argument("--decimals", type=int, default=None, help="fixed decimal places (default: 6 significant digits)")
    a = p.parse_args(argv)
    print(minutes(a.seconds, a.decimals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
