"""``python -m xpt_ds.cli.sweep --config BASE --methods xpt scratch ... --sizes 100K 400K 1.6M --out DIR``

Post-trains each method (or labelled arm) on a ladder of training-data sizes (``data.train_tokens``: nested
subsets of the corpus) with the same number of steps for every size, as 002 §5.1 does (less data = more
epochs), once per ``--seeds`` replicate, then scores every run with ``xpt_ds.cli.evaluate`` (the best checkpoint
under ``checkpoint.keep_best``) and, given fine-tuning files, ``xpt_ds.cli.export`` + ``xpt_ds.cli.finetune``.
Training and fine-tuning are child processes (``--nproc`` > 1: the deepspeed launcher); evaluation and export
run in this process, one at a time even when ``--parallel`` trains several runs at once. Each command's output
is in the run's log.
Writes ``DIR/results.jsonl`` (one row per finished run, written when it finishes), ``DIR/results.md`` (mean ±
std over seeds), ``DIR/plot_<metric>.png``, TensorBoard scalars under ``DIR/tb`` and ``DIR/summary.json`` with
the data-efficiency ratio (how much data Scratch needs to match each arm; ``xpt_ds.sweeps.report``). A run
whose row is in ``results.jsonl`` is not run again (``--rerun-changed``: unless the row was made with another
config or arguments); a failed one is reported with its log and the sweep goes on.

``--score-text en=en.txt uk=uk.txt`` (a decoder source) also scores each run's export on raw text in its own
tokenizer (``xpt_ds.cli.evaluate --text``: bits per byte, pieces per word) and the source itself on the same
files (``DIR/source_text.json``): what adapting the source cost each text, English included. ``--drop-weights``
deletes a run's checkpoints and export once its row is written, for a machine whose disk holds a few runs.
``--probe-text en`` also probes each run on that file with the source's own embeddings and head
(``xpt_ds.cli.probe``): what its layers kept of English, apart from what its vocabulary costs.
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path

from xpt_ds.errors import ArgumentParser, INTERRUPTED_EXIT_CODE, UserError, cli_errors
from xpt_ds.io.paths import unwritable, unwritable_unmade
from xpt_ds.runtime.process_exit import exit_process


def parse_args(argv: list[str]) -> argparse.Namespace:
    from xpt_ds.config.flags import add_flags
    from xpt_ds.config.methods import METHODS
    from xpt_ds.finetuning.config import FinetuneConfig
    from xpt_ds.sweeps.plan import FINETUNE_SET_BY_SWEEP
    p = ArgumentParser(prog="xpt-ds sweep", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="base run config (YAML/JSON), e.g. a two-phase xpt config or a "
                                                   "TreLM phase graph (each method gets its own phases where the "
                                                   "base's do not suit it: xpt_ds.sweeps.plan.method_config)")
    p.add_argument("--methods", nargs="+", required=True, metavar="ARM",
                   help=f"a method (of {', '.join(METHODS)}), or LABEL=METHOD for another arm of a method, told "
                        "apart by --set LABEL:... (e.g. xpt_focus=xpt with --set xpt_focus:model.embedding_init=focus)")
    p.add_argument("--sizes", nargs="+", required=True, metavar="SIZE",
                   help="training tokens per run (data.train_tokens): 100K 400K 1.6M or integers")
    p.add_argument("--out", required=True, type=Path, help="sweep directory (results, plots, runs/METHOD/SIZE)")
    p.add_argument("--seeds", nargs="+", type=int, default=[], metavar="SEED",
                   help="replicates: each run once per seed, which sets model.init_seed, seed and data.seed (the "
                        "subset, order and masks), in runs/ARM/SIZE/seedN; scored on the same masks")
    p.add_argument("--nproc", type=int, default=1, help="ranks per run: 1 = one process, else the deepspeed launcher")
    p.add_argument("--parallel", type=int, default=1,
                   help="one-process runs side by side (evaluation and export still one at a time); with several GPUs, "
                        "run slot i sees GPU i mod count, else they share the one device")
    p.add_argument("--deadline-minutes", type=float, default=0,
                   help="start no run after this many minutes (running ones finish); rerun the sweep to go on")
    p.add_argument("--largest-first", action="store_true",
                   help="run the largest size (every seed) before the others, so a sweep cut short by its deadline "
                        "has the headline comparison replicated; default: seed by seed, smallest size first")
    p.add_argument("--rerun-changed", action="store_true",
                   help="run again every run whose row in results.jsonl was made with another config or arguments "
                        "(default: keep it, with a warning); its rows move to results.superseded.jsonl and its run "
                        "directory to RUN.superseded, so nothing is lost")
    p.add_argument("--dry-run", action="store_true",
                   help="say what the sweep would do, run by run (skip, rerun, resume, start), and change nothing: "
                        "no run starts, no row or run directory moves, the arm configs go to a temporary folder")
    p.add_argument("--test-shards", nargs="+", default=[], metavar="SPEC",
                   help="held-out shards for xpt_ds.cli.evaluate (default: the base config's data.valid_shards)")
    p.add_argument("--unigram", nargs="+", default=[], metavar="TRAIN_SPEC",
                   help="also score the unigram predictor of these training shards on the same masked tokens "
                        "(DIR/unigram.json), the reference every report table shows")
    p.add_argument("--score-text", nargs="+", default=[], metavar="LABEL=FILE",
                   help="a decoder source: also export each run and score the export on these UTF-8 text files "
                        "(one document a line) with xpt_ds.cli.evaluate --text, in its own tokenizer, at evaluate's "
                        "default --seq-len (the model's positions, the source's for every run): bits per byte and "
                        "pieces per word per LABEL in each row (RUN_DIR/text_LABEL.json) and in results.md, and "
                        "the source itself (the first arm's model.source) on the same files, once "
                        "(DIR/source_text.json), e.g. en=en.txt uk=uk_test.txt")
    p.add_argument("--probe-text", metavar="LABEL",
                   help="a --score-text label whose file is in the source's language: also probe each run on it "
                        "(xpt_ds.cli.probe, RUN_DIR/probe.json): its post-trained layers with the source's own "
                        "embeddings and head, in the source's tokenizer (without ITLs where it has them), as the "
                        "row's LABEL_probe figures beside the source's; what the layers kept, whatever the "
                        "vocabulary costs")
    p.add_argument("--drop-weights", action="store_true",
                   help="once a run's row is in results.jsonl, delete its checkpoints (RUN_DIR/checkpoints) and its "
                        "export (RUN_DIR/export); its scores, logs, config, metrics, status and TensorBoard events "
                        "stay. Such a run cannot be scored again: resumed later (its row missing, or its training "
                        "changed under --rerun-changed) it trains again from the start. Runs whose rows earlier "
                        "invocations wrote keep their weights")
    p.add_argument("--eval-batch-size", type=int, default=16, help="xpt_ds.cli.evaluate --batch-size")
    p.add_argument("--eval-max-batches", type=int, default=0, help="xpt_ds.cli.evaluate --max-batches (0 = all)")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="[METHOD:][SIZES:]KEY=VALUE",
                   help="train config override for every run (e.g. optim.micro_batch_size=16), only one arm's "
                        "(a label, or a method: its every arm; e.g. scratch:phases.0.lr=5e-4), only one size's or a "
                        "size range's, inclusive (e.g. 800K..:optim.grad_accum=8, xpt:100K..400K:phases.0.lr=1e-4)")
    ft = p.add_argument_group("downstream (xpt_ds.cli.finetune on each run's export; needs --finetune-train and "
                              "--finetune-test)")
    add_flags(ft, FinetuneConfig, prefix="finetune-", dest_prefix="finetune_", skip=FINETUNE_SET_BY_SWEEP)
    ft.add_argument("--finetune-sizes", nargs="+", default=[], metavar="SIZE",
                    help="fine-tune only the runs of these sizes (default: every size)")
    a = p.parse_args(argv)
    if a.nproc < 1 or a.parallel < 1:
        p.error("--nproc and --parallel must be >= 1")
    if not a.deadline_minutes >= 0:  # a negative one (or nan) would start nothing
        p.error(f"--deadline-minutes must be >= 0 (0 = none), got {a.deadline_minutes}")
    if a.eval_batch_size < 1:
        p.error(f"--eval-batch-size must be >= 1, got {a.eval_batch_size}")
    if a.eval_max_batches < 0:
        p.error(f"--eval-max-batches must be >= 0 (0 = all), got {a.eval_max_batches}")
    return a


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM (``kill PID``, ``timeout``, a job scheduler) raises KeyboardInterrupt in the sweep, as Ctrl-C does
    (``stages.Terminated``, which passes SIGTERM on to the training runs where a Ctrl-C passes SIGINT), so that the
    running stages are stopped with it, not left training on their own. Only in the main thread (where Python
    delivers signals); the previous handler comes back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from xpt_ds.sweeps.stages import Terminated

    def interrupt(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@cli_errors
def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)  # before torch and DeepSpeed: --help is instant
    problem = (unwritable_unmade if a.dry_run else unwritable)(a.out)  # a dry run said "would start" regardless
    if problem is not None:
        raise UserError(f"--out {a.out}: {problem}")
    if a.dry_run:
        return _dry_run(a)
    from xpt_ds.runtime.run_lock import hold
    # One sweep writes a sweep directory at a time: a second one set the first one's live run aside and trained
    # it again beside it, and rewrote the arm configs its next runs read.
    with hold(a.out, ".sweep.lock", "xpt-ds sweep", "sweep directory", "--out") or contextlib.nullcontext():
        return _sweep(a)


def _sweep(a: argparse.Namespace) -> int:
    from xpt_ds.config import ConfigError
    from xpt_ds.sweeps.plan import build_plan
    from xpt_ds.sweeps.report import write_report
    from xpt_ds.sweeps.rows import read_rows
    from xpt_ds.sweeps.runner import sweep
    from xpt_ds.sweeps.stages import Interrupted
    try:
        plan = build_plan(a)
    except ValueError as e:  # a size or --set item that does not parse
        raise ConfigError(str(e)) from None
    try:
        with _sigterm_interrupts():
            failures = sweep(plan)
    except (KeyboardInterrupt, Interrupted):  # the running stages were stopped (runner.stop_stages)
        print(f"interrupted: sweep stopped; its finished runs are in {plan.out / 'results.jsonl'}: rerun the same "
              "command to go on", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE
    rows = list(read_rows(plan.out / "results.jsonl").values())
    write_report(plan.out, rows, failures)
    print(f"wrote {plan.out / 'results.md'}, {plan.out / 'summary.json'}, plots and {plan.out / 'tb'}")
    for f in failures:
        print(f"failed: {f['run']} ({f['stage']} exited {f['exit']}); log: {f['log']}", file=sys.stderr)
    return 1 if failures else 0


def _dry_run(a: argparse.Namespace) -> int:
    import tempfile

    from xpt_ds.config import ConfigError
    from xpt_ds.sweeps.plan import build_plan
    from xpt_ds.sweeps.runner import dry_run
    with tempfile.TemporaryDirectory(prefix="xpt_sweep_configs_") as configs:
        try:
            plan = build_plan(a, Path(configs))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        todo = dry_run(plan)
    print(f"dry run: {len(todo)} of {len(plan.runs())} runs would start; nothing was changed in {plan.out}")
    return 0


if __name__ == "__main__":
    exit_process(main())
