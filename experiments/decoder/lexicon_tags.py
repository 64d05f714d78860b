"""Tasks that only an English model's own knowledge solves, in sentences of filler words with number and colour
words inserted; the test rows' number and colour words appear in no training row.

    python -m experiments.decoder.lexicon_tags OUT [--relation | --pairs] [--split-colours] [--train 300]
        [--test 200] [--seed 0]

writes ``OUT/train.jsonl`` and ``OUT/test.jsonl``. Word tagging (``tokens``, ``tags``; ``xpt-ds finetune --task
token_classification``): number words ``B-NUM``, colour words ``B-COL``, the rest ``O``. ``--relation``
(KLUE-RE records; ``--task relation``): a number word and a colour word, or two of one kind, marked as subject and
object, both of entity type ``W``; the label is ``num:col``, ``col:num`` or, for two of a kind, ``no_relation``.
``--pairs`` (``sentence1``, ``sentence2``, ``label``; ``--task classification --text-column sentence1
--text-pair-column sentence2``): the first sentence ends with a number word and the second starts with one; the
label says whether they are the same word. ``--split-colours``: the test rows' colour words are ones SmolLM2's
tokenizer cuts into 2-3 pieces (``Ġm au ve``), and every training colour word is one piece. RESULTS.md ("Token
classification reads words as running text", "Relations on a decoder") fine-tunes SmolLM2 on them.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NUMBERS = ("one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty hundred "
           "thousand").split()
COLOURS = "red blue green yellow black white purple orange brown pink grey violet silver golden crimson".split()
SPLIT_COLOURS = ("khaki mauve taupe ochre fuchsia sepia cerulean vermilion chartreuse aquamarine emerald azure "
                 "burgundy lilac magenta beige maroon teal").split()
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


def relation_rows(rng: random.Random, n: int, numbers: list[str], colours: list[str]) -> list[dict]:
    """``n`` KLUE-RE records: 4-8 filler words with two lexicon words inserted at word boundaries, either one the
    subject."""
    out = []
    for _ in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(4, 8))]
        kinds = [rng.choice(("num", "col")) for _ in range(2)]
        first, second = sorted(rng.sample(range(len(words) + 2), 2))
        words.insert(first, rng.choice(numbers if kinds[0] == "num" else colours))
        words.insert(second, rng.choice(numbers if kinds[1] == "num" else colours))
        at = [len(" ".join(words[:k])) + (k > 0) for k in range(len(words))]
        ents = [{"word": words[k], "start_idx": at[k], "end_idx": at[k] + len(words[k]) - 1, "type": "W"}
                for k in (first, second)]
        if rng.random() < 0.5:
            ents, kinds = ents[::-1], kinds[::-1]
        label = "no_relation" if kinds[0] == kinds[1] else f"{kinds[0]}:{kinds[1]}"
        out.append({"sentence": " ".join(words), "subject_entity": ents[0], "object_entity": ents[1],
                    "label": label})
    return out


def pair_rows(rng: random.Random, n: int, numbers: list[str], colours: list[str]) -> list[dict]:
    """``n`` sentence pairs of 3-6 filler words each, the first ending with a number word and the second starting
    with one: the same word in half of them (``colours`` is unused)."""
    out = []
    for _ in range(n):
        same = rng.random() < 0.5
        last = rng.choice(numbers)
        first = last if same else rng.choice([x for x in numbers if x != last])
        words = [[rng.choice(FILLER) for _ in range(rng.randint(3, 6))] for _ in range(2)]
        out.append({"sentence1": " ".join(words[0] + [last]), "sentence2": " ".join([first] + words[1]),
                    "label": "same" if same else "different"})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    task = parser.add_mutually_exclusive_group()
    task.add_argument("--relation", action="store_true", help="KLUE-RE records instead of tagged words")
    task.add_argument("--pairs", action="store_true", help="sentence pairs instead of tagged words")
    parser.add_argument("--split-colours", action="store_true", help="test colour words of 2-3 SmolLM2 pieces")
    parser.add_argument("--train", type=int, default=300)
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    one_piece = [c for c in COLOURS if c != "crimson"]  # Ġcrim son
    colours = (one_piece, SPLIT_COLOURS) if args.split_colours else (COLOURS[::2], COLOURS[1::2])
    splits = (("train", args.train, NUMBERS[::2], colours[0]), ("test", args.test, NUMBERS[1::2], colours[1]))
    for name, n, numbers, colours in splits:
        make = relation_rows if args.relation else pair_rows if args.pairs else rows
        lines = [json.dumps(row) + "\n" for row in make(rng, n, numbers, colours)]
        (args.out / f"{name}.jsonl").write_text("".join(lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
