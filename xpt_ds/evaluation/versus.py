"""A model's score beside its baselines, in one line that says plainly whether it beats them.

``python -m xpt_ds.evaluation.versus --key bits_per_char --model RUN/test_model.json unigram=RUN/test_unigram.json
uniform=RUN/test_uniform.json`` reads ``xpt_ds.cli.evaluate --out`` files (lower is better for every key it takes) and
prints e.g. ``test bits per character (lower is better): trained model 5.201, 0.274 (5.0 %) below the unigram
predictor (5.475) and 1.221 (19.0 %) below the uniform guess (6.422)``. A model at or above the unigram predictor
has learned no more than piece frequencies; the line says so rather than leaving the reader to compare numbers.
"""
from __future__ import annotations

import json
import sys

from xpt_ds.errors import ArgumentParser

NAMES = {"unigram": "the unigram predictor", "uniform": "the uniform guess"}
UNITS = {"bits_per_char": "bits per character", "bits_per_byte": "bits per byte", "bits_per_word": "bits per word",
         "loss": "loss (nats per piece)"}


def versus_line(model: float, baselines: dict[str, float], key: str, split: str = "test") -> str:
    """One line: ``model``'s ``key`` against each baseline (name -> score), by how much it is below or above."""
    parts = []
    for name, score in baselines.items():
        gap = score - model
        side = "below" if gap > 0 else "above" if gap < 0 else "equal to"
        size = f"{abs(gap):.3f} ({abs(gap) / score:.1%}) " if gap else ""
        parts.append(f"{size}{side} {NAMES.get(name, name)} ({score:.3f})")
    line = f"{split} {UNITS.get(key, key)} (lower is better): trained model {model:.3f}, " + " and ".join(parts)
    if "unigram" in baselines and model >= baselines["unigram"]:
        line += "; it has not learned more than piece frequencies yet"
    return line


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m xpt_ds.evaluation.versus", description=__doc__.split("\n\n")[0])
    p.add_argument("--key", default="bits_per_char", choices=sorted(UNITS), help="the score compared")
    p.add_argument("--model", required=True, help="the model's `xpt_ds.cli.evaluate --out` file")
    p.add_argument("baselines", nargs="+", metavar="NAME=FILE", help="a baseline's `--out` file (unigram, uniform)")
    a = p.parse_args(argv)
    try:
        pairs = dict(b.split("=", 1) for b in a.baselines)
    except ValueError:
        p.error(f"baselines are NAME=FILE, got {a.baselines}")

    def score(path: str) -> float:
        try:
            return float(json.loads(open(path, encoding="utf-8").read())[a.key])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"error: {path}: no {a.key} score ({type(e).__name__}: {e})") from None

    print(versus_line(score(a.model), {name: score(path) for name, path in pairs.items()}, a.key))
    return 0


if __name__ == "__main__":
    sys.exit(main())
