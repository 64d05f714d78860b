"""Step 4 of ``launch/gpu_decoder.sh`` (and its ``--pack``) before the archive: the reports and the verdicts.

    python -m experiments.decoder.pack --out OUT

As ``experiments.uagec.pack`` for issue 22, whose steps it runs on this study's sweeps: the report of every sweep
this session did not finish (no exit-0 ``sweep_NAME`` line in ``OUT/steps.tsv`` since its last ``unpack``) is
rewritten from its results.jsonl rows so far, then ``OUT/claims.md`` (``experiments.decoder.claims``). A failure
of either is reported and the rest still runs: the script then packs what there is.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from xpt_ds.errors import cli_errors

from experiments.decoder import claims
from experiments.uagec.pack import write_reports

SWEEPS = claims.SWEEPS  # OUT's sweep folders (target, keep_vocab, extend), each the script's step sweep_NAME


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.decoder.pack", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="launch/gpu_decoder.sh's OUT")
    a = p.parse_args(argv)
    write_reports(a.out, SWEEPS, claims.main)
    return 0  # a failed report is in the log; the archive is made all the same


if __name__ == "__main__":
    raise SystemExit(main())
