"""The study's training sizes in each sweep's own pieces: ``launch/gpu_decoder.sh``'s ``OUT/sizes.json``.

    python -m experiments.decoder.sizes --largest 600000 --fractions 0.25 0.5 1 \
        --sweep target=P/uk/manifest.json keep_vocab=P/uk_src/manifest.json extend=P/uk_ext/manifest.json \
        --out OUT/sizes.json [--print SWEEP]

``--largest`` counts pieces of the first ``--sweep``'s tokenizer (the new SentencePiece vocabulary). A sweep
whose shards hold the same documents in another tokenizer (the source's own, or the extended one) cuts them into
more or fewer pieces, so its sizes are scaled by the ratio of its train split's pieces to the first one's: every
sweep's size k is the same share of the corpus (``data.train_tokens`` takes the documents of a seeded order until
that many pieces). Sizes are whole thousands. ``--print SWEEP`` prints that sweep's sizes for the script.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from xpt_ds.errors import UserError, cli_errors


def train_tokens(manifest: Path) -> int:
    """The pieces of a prepared corpus's train split (``xpt-data prepare``'s manifest.json)."""
    try:
        return int(json.loads(manifest.read_text())["splits"]["train"]["tokens"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{manifest}: not a prepared corpus's manifest.json with a train split ({e})") from None


def sizes(largest: int, fractions: list[float], manifests: dict[str, Path]) -> dict:
    """{"fractions", "largest", "train_tokens": {sweep: pieces}, "sweeps": {sweep: [size per fraction]}}."""
    if largest <= 0 or not fractions or any(not 0 < f <= 1 for f in fractions):
        raise UserError(f"--largest must be positive and every --fractions value in (0, 1]: {largest}, {fractions}")
    counts = {name: train_tokens(path) for name, path in manifests.items()}
    first = next(iter(counts))
    if largest > counts[first]:
        raise UserError(f"--largest {largest} is more than the {counts[first]} train pieces of {manifests[first]}")
    out = {}
    for name, count in counts.items():
        scale = count / counts[first]
        out[name] = [max(1000, 1000 * round(largest * f * scale / 1000)) for f in fractions]
    return {"fractions": fractions, "largest": largest, "train_tokens": counts, "sweeps": out}


def _pair(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=MANIFEST, got {text!r}")
    return name, Path(path)


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.decoder.sizes", description=__doc__.split("\n\n")[0])
    p.add_argument("--largest", type=int, required=True, help="the largest size, in the first sweep's pieces")
    p.add_argument("--fractions", type=float, nargs="+", required=True, help="each size's share of the largest")
    p.add_argument("--sweep", type=_pair, nargs="+", required=True, metavar="NAME=MANIFEST")
    p.add_argument("--out", type=Path, required=True, help="sizes.json to write")
    p.add_argument("--print", dest="show", metavar="SWEEP", help="print this sweep's sizes, space-separated")
    a = p.parse_args(argv)
    result = sizes(a.largest, a.fractions, dict(a.sweep))
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    if a.show:
        if a.show not in result["sweeps"]:
            raise UserError(f"--print {a.show}: not one of the sweeps ({', '.join(result['sweeps'])})")
        print(" ".join(map(str, result["sweeps"][a.show])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
