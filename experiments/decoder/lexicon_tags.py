"""Word tagging that only an English model's own knowledge solves: number words ``B-NUM``, colour words ``B-COL``,
the rest ``O``, in sentences of filler words; the test rows' number and colour words appear in no training row.

    python -m experiments.decoder.lexicon_tags OUT [--train 300] [--test 200] [--seed 0]

writes ``OUT/train.jsonl`` and ``OUT/test.jsonl`` (``tokens``, ``tags``) for ``xpt-ds finetune --task
token_classification``. RESULTS.md ("Token classification reads words as running text") fine-tunes SmolLM2 on them.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NUMBERS = ("one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty hundred "
           "thousand").split()
COLOURS = "red blue green yellow black white purple orange brown pink grey violet silver golden crimson".split()
FILLER = ("the a house dog man woman saw had with near old small big river city road tree book car we they she he "
          "walked found bought gave under behind across very quite many some of in on at and but").split()


def rows(rng: random.Random, n: int, numbers: list[str], colours: list[str]) -> list[dict]:
    """``n`` sentences of 5-10 filler words with 0-2 of ``numbers`` and 0-2 of ``colours`` inserted anywhere."""
    out = []
    for _ in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(5, 10))]
        tags = ["O"] * len(words)
        for lexicon, tag in ((numbers, "B-NUM"), (colours, "B-COL")):
            for _ in range(rng.randint(0, 2)):
                at = rng.randint(0, len(words))
                words.insert(at, rng.choice(lexicon))
                tags.insert(at, tag)
        out.append({"tokens": words, "tags": tags})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=300)
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    splits = (("train", args.train, NUMBERS[::2], COLOURS[::2]), ("test", args.test, NUMBERS[1::2], COLOURS[1::2]))
    for name, n, numbers, colours in splits:
        lines = [json.dumps(row) + "\n" for row in rows(rng, n, numbers, colours)]
        (args.out / f"{name}.jsonl").write_text("".join(lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
