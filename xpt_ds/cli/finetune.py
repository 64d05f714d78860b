"""``python -m xpt_ds.cli.finetune --model DIR_OR_HUB_ID --train FILE --test FILE [--valid FILE] --out DIR``.

Fine-tunes any Hugging Face encoder (an ``xpt_ds.cli.export`` directory or a public baseline) on sentence or
sentence-pair classification/regression, IOB2 token classification or KLUE-RE relation extraction, once per
seed, and reports the test metrics per seed and as mean ± std (002 Table 3). With ``--valid`` the test metrics
are those of the epoch with the best validation score; without, of the last epoch. Defaults are 002 Table A2's;
``--preset`` selects its per-task values. Writes ``OUT/results.json`` and prints a table.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from xpt_ds.errors import cli_errors
from xpt_ds.runtime.process_exit import exit_process


def parse_args(argv: list[str]):
    """Defaults < ``--preset`` < flags given; every flag's help is its config field's."""
    from xpt_ds.finetuning.config import parse_flags
    return parse_flags(argv, __doc__.split("\n\n")[1])


@cli_errors
def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    cfg = parse_args(sys.argv[1:] if argv is None else argv)  # before torch and transformers: --help is instant
    from transformers.utils import logging as hf_logging

    from xpt_ds.finetuning.report import format_table
    from xpt_ds.finetuning.run import finetune
    hf_logging.set_verbosity_error()  # the "newly initialized classifier" notice is expected here
    hf_logging.disable_progress_bar()
    results = finetune(cfg)
    print(format_table(results))
    print(f"wrote {Path(cfg.out) / 'results.json'}")
    return 0


if __name__ == "__main__":
    exit_process(main())
