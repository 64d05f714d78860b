"""``python -m xpt_ds.cli.probe --run RUN [--tag TAG] --source-text FILE [--target-shards SPEC ...]``: where does
the source language go? (000 §4.4, Table 4.)

Scores masked-token prediction (a decoder source: next-piece bits per byte) on source-language text for the
source model, and for the post-trained model with the source vocabulary swapped back in, once with the ITLs and
once without; with ``--target-shards`` also the post-trained model on target text (``xpt_ds.evaluation.probe``).
"""
from __future__ import annotations

from pathlib import Path

from xpt_ds.errors import ArgumentParser, cli_errors
from xpt_ds.runtime.process_exit import exit_process


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="xpt-ds probe", description=__doc__.split("\n\n")[1])
    p.add_argument("--run", type=Path, required=True, help="run directory of the post-training")
    p.add_argument("--tag", help="checkpoint tag (default: newest complete)")
    p.add_argument("--source-text", type=Path, required=True, help="source-language text, one passage per line")
    p.add_argument("--source", help="source model (default: the run's model.source)")
    p.add_argument("--target-shards", nargs="*", default=[], help="also score the target side on these shards")
    p.add_argument("--seq-len", type=int, help="pieces a window reads (default: 128 for a masked LM, the model's "
                   "positions for a decoder, as evaluate --text reads)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument("--allow-pickle", action="store_true", help="read checkpoint files that are not plain data "
                   "(they can run code): only for a checkpoint you trust")
    a = p.parse_args(argv)
    if a.seq_len is not None and a.seq_len < 8 or a.batch_size < 1:
        p.error(f"--seq-len must be >= 8 and --batch-size >= 1, got {a.seq_len} and {a.batch_size}")
    from xpt_ds.evaluation.intrinsic import emit_json
    from xpt_ds.evaluation.probe import probe
    from xpt_ds.io.paths import check_output_file
    if a.out is not None:
        check_output_file(a.out, "--out", {"--run": a.run, "--source-text": a.source_text,
                                           "--target-shards": a.target_shards})
    emit_json(probe(a.run, a.source_text, a.tag, a.source, a.target_shards, a.seq_len, a.batch_size,
                    a.allow_pickle), a.out)
    return 0


if __name__ == "__main__":
    exit_process(main())
