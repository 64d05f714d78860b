"""``python -m xpt_ds.cli.export --run RUN_DIR [--tag TAG] --out DIR [--dtype bfloat16]``: a checkpoint -> a stock HF
model directory.

Works offline on one process from any ZeRO stage and any world size (``xpt_ds.export.hf``).
"""
from __future__ import annotations

from pathlib import Path

from xpt_ds.errors import ArgumentParser, cli_errors
from xpt_ds.runtime.process_exit import exit_process


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="xpt-ds export", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("--run", required=True, type=Path, help="run directory (the run config's run_dir)")
    p.add_argument("--tag", help="checkpoint tag, or 'best' (checkpoint.keep_best) (default: newest complete)")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--allow-pickle", action="store_true", help="read checkpoint files that are not plain data "
                   "(they can run code): only for a checkpoint you trust")
    # xpt_ds.export.hf.EXPORT_DTYPES's keys, written out: that module imports torch, which the parse need not
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="what the weight files "
                   "hold: the checkpoint's fp32 values as they are, or each rounded to bfloat16 (half the bytes; the "
                   "hub's form of a 1-8B decoder) (default: float32)")
    a = p.parse_args(argv)
    from xpt_ds.export.hf import export  # after the parse: torch, DeepSpeed and transformers take seconds
    print(export(a.run, a.out, a.tag, a.allow_pickle, dtype=a.dtype))
    return 0


if __name__ == "__main__":
    exit_process(main())
