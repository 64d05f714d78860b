"""``profile.*``: torch.profiler over chosen steps of a run, on chosen ranks, and where a step's time goes.

A profile records ``profile.steps`` global steps from ``profile.start_step`` (1-based, as the logs count), after
``profile.warmup`` steps that the profiler runs but does not record (its own start-up falls in them), and again
every ``profile.every`` steps (0: once). A profile that would end past the phases' last step is not started. Each
rank of ``profile.ranks`` writes, when its profile ends, into ``RUN_DIR/profile/steps_S-E/``:

- ``rankR.pt.trace.json.gz``: the Chrome trace (Perfetto or chrome://tracing open it). Its ``ProfilerStep#k``
  spans are global steps S - warmup + k;
- ``rankR.txt``: where a step's host time goes, by the parts the trainer marks with ``record_function``
  (``PARTS``: waiting for a batch, forward, backward, the optimizer step, logging, validation, the checkpoint,
  the ranks' exchange, a phase hand-over), then the operators by self time (device time on CUDA).

Both are written to a temporary name and renamed, so neither is ever half-written; rank 0 logs one line per profile.
A profile a resumed attempt starts inside (its warmup began before the attempt's first step), or a run that stops
inside one, writes nothing and says so. Profiling changes no computed value: the same run with and without it
trains to the same bits (``tests/metrics/test_profiler_run.py``).
"""
from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import torch

from xpt_ds.config import ConfigError, ProfileConfig
from xpt_ds.io.paths import write_text_atomic

log = logging.getLogger(__name__)

# The parts of a step the trainer marks (``part``), in the order a step runs them.
PARTS = ("data", "forward", "backward", "optimizer", "phase_switch", "log", "validation", "checkpoint", "exchange")
STEP = "ProfilerStep*"  # key_averages' name for every ProfilerStep#k span
TABLE_ROWS = 40


# Whether a profiler records in this process: 0.2 us a call against 6 us for a record_function span with none
# (a step marks 9 parts or more); where a torch lacks it, every part is a span.
_recording = getattr(torch._C._autograd, "_profiler_enabled", lambda: True)
_NO_SPAN = contextlib.nullcontext()


def part(name: str):
    """A ``record_function`` span ``xpt.NAME`` around one part of a step, which the profile's breakdown reads; none
    while no profiler records."""
    return torch.profiler.record_function(f"xpt.{name}") if _recording() else _NO_SPAN


def check_ranks(cfg: ProfileConfig, world: int) -> None:
    """``profile.ranks`` against the job's world size, when it starts (the config alone cannot know it)."""
    past = [r for r in cfg.ranks if r >= world]
    if cfg.start_step and past:
        have = f"{world} ranks (0-{world - 1})" if world > 1 else "1 rank (0)"
        raise ConfigError(f"config key 'profile.ranks' names rank {past[0]}, but this job has {have}")


class StepProfiler:
    """One rank's profiles over the run: ``begin(step)`` before a global step, ``end(step)`` after it,
    ``close()`` when the run stops. A rank that is not in ``profile.ranks`` records nothing; rank 0 logs each
    profile whether or not it records (where its own files failed to write, its warning says so instead)."""

    def __init__(self, cfg: ProfileConfig, run_dir: Path, rank: int, world: int, device: torch.device,
                 last_step: int):
        self.cfg, self.root, self.rank, self.world, self.device = cfg, Path(run_dir) / "profile", rank, world, device
        self.last_step = last_step  # the phases' planned steps: a profile past them is not started
        self.records = cfg.start_step > 0 and rank in cfg.ranks
        self.window: tuple[int, int] | None = None  # (first, last) recorded step of the profile under way
        self.prof = None
        self.summary: dict[str, float] | None = None
        self.started = False  # whether this attempt ran a step yet (a resume starts past step 1)

    def plan(self) -> str | None:
        """What the run will profile, for rank 0's start-up log; None when profiling is off."""
        c = self.cfg
        if not c.start_step:
            return None
        then = f", then every {c.every} steps to step {self.last_step}" if c.every else ""
        return (f"profile: steps {c.start_step}-{c.start_step + c.steps - 1}{then}, after {c.warmup} warmup step"
                f"{'s' if c.warmup != 1 else ''}, on rank{'s' if len(c.ranks) > 1 else ''} "
                f"{', '.join(str(r) for r in c.ranks)} (into {self.root})")

    def _window_from(self, step: int) -> tuple[int, int] | None:
        """The profile whose warmup starts at ``step``, as (first, last) recorded step; None if none does."""
        c = self.cfg
        if not c.start_step:
            return None
        offset = step + c.warmup - c.start_step
        if offset < 0 or (offset and (not c.every or offset % c.every)):
            return None
        first = step + c.warmup
        return (first, first + c.steps - 1) if first + c.steps - 1 <= self.last_step else None

    def _skipped(self, step: int) -> tuple[int, int] | None:
        """A profile this attempt starts inside of (its warmup began before ``step``, the attempt's first)."""
        c = self.cfg
        for begun in range(max(1, step - c.warmup - c.steps + 1), step):
            window = self._window_from(begun)
            if window is not None and window[1] >= step:
                return window
        return None

    def begin(self, step: int) -> None:
        """Before global step ``step`` runs."""
        if not self.started:
            self.started = True
            missed = self._skipped(step)
            if missed is not None and self.rank == 0:
                log.info(f"profile of steps {missed[0]}-{missed[1]} not taken: this attempt starts at step {step}, "
                         f"inside it (profile.warmup={self.cfg.warmup})")
        if self.window is not None:
            return
        window = self._window_from(step)
        if window is None:
            return
        self.window = window
        self.summary = None  # rank 0's breakdown, once its trace is written
        if self.records:
            self.prof = self._profiler()
            self.prof.start()

    def _profiler(self):
        c, cuda = self.cfg, self.device.type == "cuda"
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        return torch.profiler.profile(
            activities=activities, record_shapes=c.record_shapes, profile_memory=c.memory, with_stack=c.with_stack,
            schedule=torch.profiler.schedule(wait=0, warmup=c.warmup, active=c.steps, repeat=1),
            on_trace_ready=self._write)

    def end(self, step: int) -> None:
        """After global step ``step``, and whatever the loop does after it (logging, validation, a checkpoint)."""
        if self.window is None:
            return
        if self.prof is not None:
            self.prof.step()  # the profile's last step: the schedule hands the trace to _write
        if step == self.window[1]:
            if self.prof is not None:
                self.prof.stop()
                self.prof = None
            if self.rank == 0:
                self._say()
            self.window = None

    def close(self) -> None:
        """The run stops (its end, preemption, a failure): a profile under way is dropped, not written."""
        if self.window is None:
            return
        if self.prof is not None:
            prof, self.prof = self.prof, None
            prof.on_trace_ready = None  # stop() hands over what it recorded: a part of the profile, not written
            with contextlib.suppress(Exception):  # the run's own error is the one to report
                prof.stop()
        window, self.window = self.window, None
        if self.rank == 0:
            log.info(f"profile of steps {window[0]}-{window[1]} not written: the run stopped inside it")

    def folder(self, window: tuple[int, int]) -> Path:
        return self.root / f"steps_{window[0]}-{window[1]}"

    def _write(self, prof) -> None:
        """The trace and the table of this rank's profile (torch.profiler's ``on_trace_ready``)."""
        out = self.folder(self.window)
        partial = out / f".rank{self.rank}.partial.pt.trace.json.gz"  # a name export_chrome_trace gzips
        try:
            out.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(partial))
            os.replace(partial, out / f"rank{self.rank}.pt.trace.json.gz")
            # One key_averages for the breakdown and the table: a call took 0.1-0.2 s after the first's 0.7-1.2 s
            # (the tests' tiny model, 2 steps, 2 ranks on 2 CPU cores).
            averages = prof.key_averages(group_by_input_shape=self.cfg.record_shapes)
            self.summary = breakdown(averages, self.cfg.steps)
            write_text_atomic(out / f"rank{self.rank}.txt", self._report(averages))
        except OSError as e:  # a full disk: the run goes on (its checkpoints say so if it stays full)
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            log.warning(f"profile of steps {self.window[0]}-{self.window[1]} not written on rank {self.rank}: {e}")

    def _report(self, averages) -> str:
        c, (first, last) = self.cfg, self.window
        device = self.device.type == "cuda"
        table = averages.table(sort_by="self_device_time_total" if device else "self_cpu_time_total",
                               row_limit=TABLE_ROWS)
        return (f"xpt-ds profile: global steps {first}-{last} ({c.steps} recorded after {c.warmup} warmup), rank "
                f"{self.rank} of {self.world}, device {self.device}, torch {torch.__version__}\n"
                f"The trace's ProfilerStep#k is global step {first - c.warmup} + k.\n\n"
                f"Where a step's host time goes, ms a step: {format_breakdown(self.summary)}\n\n"
                f"Operators by {'self device' if device else 'self CPU'} time (torch.profiler key_averages):\n"
                f"{table}")

    def _say(self) -> None:
        (first, last), ranks = self.window, self.cfg.ranks
        who = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(str(r) for r in ranks)}"
        if self.summary is None:
            if self.records:  # rank 0's own files were not written: its warning said so
                return
            log.info(f"profile of steps {first}-{last}: {who} into {self.folder(self.window)}")
        else:
            log.info(f"profile of steps {first}-{last} written to {self.folder(self.window)} ({who}); rank 0's step, "
                     f"host ms: {format_breakdown(self.summary)}")


def breakdown(averages, steps: int) -> dict[str, float]:
    """Milliseconds a step: the whole step, each marked part and 'other' (the step less its parts) on the host; on
    CUDA also 'device_busy', the kernels' own time, as the table's device total counts it (the spans of
    ``record_function`` on the device are not kernels)."""
    host = torch.autograd.DeviceType.CPU  # a span's device-side twin has the same key (key_averages keeps both)
    found = {e.key: e.cpu_time_total / 1000 / steps for e in averages
             if e.device_type == host and (e.key == STEP or e.key.startswith("xpt."))}
    step = found.get(STEP, 0.0)
    parts = {p: found[f"xpt.{p}"] for p in PARTS if f"xpt.{p}" in found}
    device = sum(e.self_device_time_total for e in averages  # the table's "Self CUDA time total"
                 if e.device_type != host and not getattr(e, "is_user_annotation", False))
    busy = {"device_busy": device / 1000 / steps} if device else {}
    return {"step": step, **parts, "other": max(0.0, step - sum(parts.values())), **busy}


def format_breakdown(summary: dict[str, float]) -> str:
    """'step T = part t + ...', the parts of 0.05 ms or more (a part with nothing to do at these steps left out), and
    on CUDA the device's busy time."""
    parts = [f"{k} {v:.1f}" for k, v in summary.items() if k not in ("step", "device_busy") and v >= 0.05]
    line = f"step {summary['step']:.1f} = " + " + ".join(parts)
    if "device_busy" in summary:
        share = summary["device_busy"] / summary["step"] if summary["step"] else 0.0
        line += f"; the device ran kernels {summary['device_busy']:.1f} ms a step ({share:.0%})"
    return line
