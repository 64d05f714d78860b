"""What a training run writes to its terminal or log file: stderr only, a line per record, and a last line that
names the next command.

A run writes nothing to stdout of its own; DeepSpeed 0.19.8 does: its logger (``deepspeed.utils.logging``, named
``DeepSpeed``) has a handler of its own on ``sys.stdout``, made at import, which says ``Setting accelerator to CPU``
as ``import deepspeed`` picks the accelerator, and ``deepspeed.comm.torch.build_shm_op`` ``print``s ``DeepSpeed
...shm_comm_op built successfully`` as the CPU process group starts (the JIT op loads print their progress too).
``library_output_to_stderr`` sends every ``print`` of the run to stderr, and a logger made inside it (DeepSpeed's,
on a first import) keeps stderr as its stream; ``setup_logging`` then hands DeepSpeed's and transformers' records,
and Python's warnings, to the root logger, so that every line has the run's format and goes through one handler.
It drops the deprecation warnings of calls DeepSpeed makes (``LIBRARY_DEPRECATIONS``): no setting of the run's
changes them, and they can come back at every step (below).

That handler (``BarSafeHandler``) writes a record whole, one ``write``, after tqdm has cleared its bars from the
stream (``tqdm.external_write_mode``), which tqdm redraws below it: a log line never continues the bar's row. The
bar itself is drawn only on a terminal (``xpt_ds.metrics.logger.MetricsLogger``); a log file gets the log step's
line instead.
"""
from __future__ import annotations

import contextlib
import json
import logging
import shlex
import sys
import warnings
from pathlib import Path

FORMAT = "%(asctime)s %(name)s: %(message)s"
LIBRARY_LOGGERS = ("DeepSpeed", "transformers")  # those with handlers of their own and propagate off
# ZeRO-3 (DeepSpeed 0.19.8) gathers and reduce-scatters through these, deprecated in torch 2.13. A warning is said once
# per call site only until the warning filters change, and on the CPU accelerator ZeRO-3's step asks for the device
# count (``numactl --hardware``, through ``subprocess``, which changes them): each rank said all four (three lines
# each) at every step.
LIBRARY_DEPRECATIONS = (r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated",)


class BarSafeHandler(logging.StreamHandler):
    """A StreamHandler that clears the tqdm bars drawn on its stream before a record and redraws them after."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm  # here: `xpt-ds train --help` imports this module
        with tqdm.external_write_mode(file=self.stream):
            super().emit(record)


def library_output_to_stderr():
    """Around the run: ``print`` goes to stderr (DeepSpeed's op builds, its first import's logger)."""
    return contextlib.redirect_stdout(sys.stderr)


def setup_logging(rank0: bool, stream=None) -> logging.Handler:
    """The root logger at INFO on rank 0 (WARNING on the others) with one ``BarSafeHandler`` on ``stream``
    (stderr); the libraries' loggers and ``warnings`` go through it. Returns the handler."""
    root = logging.getLogger()
    for old in list(root.handlers):  # what basicConfig, or an earlier setup in this process, left
        root.removeHandler(old)
    handler = BarSafeHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(logging.INFO if rank0 else logging.WARNING)
    for name in LIBRARY_LOGGERS:  # each keeps its own level: only its handlers and the propagation change
        lib = logging.getLogger(name)
        for old in [h for h in lib.handlers if isinstance(h, logging.StreamHandler)]:
            lib.removeHandler(old)
        lib.propagate = True
    logging.captureWarnings(True)  # Python's warnings: through the handler too, not straight onto the bar's row
    for message in LIBRARY_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)
    return handler


@contextlib.contextmanager
def quiet_load_report():
    """Around a ``from_pretrained`` whose missing and unexpected weights the project reports itself
    (``xpt_ds.model.build.open_source``): transformers 5.x's LOAD REPORT table and its tied-weights note ('This
    checkpoint seem corrupted') come from the ``transformers.modeling_utils`` logger at WARNING; errors still show.
    Its 'Loading weights' bar is off too: in a log file it is one more row of carriage returns."""
    from transformers.utils import logging as hf_logging
    lib = logging.getLogger("transformers.modeling_utils")
    level, bars = lib.level, hf_logging.is_progress_bar_enabled()
    lib.setLevel(logging.ERROR)
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        lib.setLevel(level)
        if bars:
            hf_logging.enable_progress_bar()


def last_logged(metrics: Path, key: str) -> float | None:
    """The last value of ``key`` in a metrics.jsonl, or None."""
    value = None
    try:
        lines = metrics.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:  # a line cut by a crash mid-write
            continue
        if row.get(key) is not None:
            value = row[key]
    return value


def finished_line(run_dir: str, steps: int, planned: int, time_stopped: list[str], keep_best: bool) -> str:
    """Rank 0's last line of a finished run: its steps, its final loss (validation's if it has one), and the
    export command for it. ``time_stopped``: the phases the time budget (guard.max_train_minutes) ended early,
    which a resume does not train again (``xpt_ds.training.time_budget``)."""
    done = f"{steps} steps" if steps == planned else f"{steps} of {planned} planned steps"
    if time_stopped:
        done += (f" (the time budget, guard.max_train_minutes, ended phase {', '.join(map(repr, time_stopped))} "
                 "early; a resume does not train it further)")
    metrics = Path(run_dir) / "metrics.jsonl"
    for key in ("valid/loss", "train/loss"):
        loss = last_logged(metrics, key)
        if loss is not None:
            done += f", final {key.split('/')[0]} loss {loss:.4f}"
            break
    tag = " --tag best" if keep_best and (Path(run_dir) / "best.json").is_file() else ""
    out = str(Path(run_dir) / "export")
    return f"finished: {done}; next: xpt-ds export --run {shlex.quote(str(run_dir))}{tag} --out {shlex.quote(out)}"
