"""The stages of a sweep's runs as they run: training and fine-tuning as child processes (through the deepspeed
launcher when ``--nproc`` > 1), evaluation and export as calls in the sweep's own process, one at a time
(``Stages``); each stage's log and seconds, its failure (``StepFailed``), and the stop of them all when the sweep
is stopped (``stop_stages``, ``Interrupted``).

A stage process is tethered to the sweep (``xpt_ds.runtime.tether``): in a session of its own, with a small process
between them that passes the sweep's stop signal to the training ranks themselves (the deepspeed launcher on one
node dies of a SIGTERM and leaves its ranks training) and, when the sweep dies in any way (``kill -9`` included),
stops them as a SIGTERM does. A stopped run has ``STOP_GRACE_S`` to checkpoint before what is left of it is
killed."""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from xpt_ds.errors import INTERRUPTED_EXIT_CODE
from xpt_ds.runtime.launch_guard import RANKS
from xpt_ds.runtime.tether import kill_group, tethered
from xpt_ds.sweeps.plan import Plan

STOP_GRACE_S = 300.0  # a stopped training run's time to checkpoint and exit before its processes are killed


class StepFailed(Exception):
    def __init__(self, stage: str, code: int, log: Path):
        super().__init__(f"{stage} exited {code}; log: {log}")
        self.stage, self.code, self.log = stage, code, log


class Interrupted(Exception):
    """The sweep is being stopped (``stop_stages``): no stage starts any more."""


class Terminated(KeyboardInterrupt):
    """SIGTERM to the sweep (``kill PID``, ``timeout``, a job scheduler), raised as Ctrl-C is (``cli.sweep``)."""


_live: set[subprocess.Popen] = set()  # the tethers of the stage processes running now, in every --parallel slot


_live_lock = threading.Lock()


stopping = threading.Event()


def stop_signal(error: BaseException | None) -> int:
    """The signal that stops the running stages when ``error`` stops the sweep: SIGINT for a Ctrl-C (the run says
    'interrupted'), else SIGTERM (it says 'preempted'); both checkpoint first."""
    interrupted = isinstance(error, KeyboardInterrupt) and not isinstance(error, Terminated)
    return signal.SIGINT if interrupted else signal.SIGTERM


def _send(procs: list[subprocess.Popen], sig: int) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)  # to the tether, which passes it to the ranks


def stop_stages(sig: int = signal.SIGTERM) -> None:
    """Stop every stage process still running and start no more: ``sig`` to each one's training ranks (SIGTERM or,
    for a Ctrl-C, SIGINT: a run checkpoints and exits, ``xpt_ds.runtime.preemption``), then, after STOP_GRACE_S,
    SIGKILL to what is left (the tether does both). A Ctrl-C while it waits is passed on too: a run's second Ctrl-C
    stops it at once, without a checkpoint. A sweep stopped by Ctrl-C or ``kill`` calls it, so that no training run
    goes on without it."""
    stopping.set()
    with _live_lock:
        procs = list(_live)
    _send(procs, sig)
    deadline = time.monotonic() + STOP_GRACE_S + 30  # the tethers kill their groups after STOP_GRACE_S
    for proc in procs:
        while True:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                break
            except subprocess.TimeoutExpired:  # a tether that did not: its group, at least
                kill_group(proc.pid)
                proc.wait()
                break
            except KeyboardInterrupt:
                _send([p for p in procs if p.poll() is None], signal.SIGINT)


def _run(cmd: list[str], log: Path, stage: str, env: dict | None = None) -> float:
    """Run one stage as a process, appending its output to ``log``; its wall seconds, or StepFailed (Interrupted
    once the sweep is being stopped: the stage did not start, or was stopped)."""
    started = time.time()
    with open(log, "a") as f, contextlib.ExitStack() as stack:  # its exit kills what is left of a stage
        f.write(f"$ {shlex.join(cmd)}\n")
        f.flush()
        with _live_lock:
            if stopping.is_set():
                raise Interrupted(stage)
            proc = stack.enter_context(tethered(cmd, ranks=RANKS, grace_s=STOP_GRACE_S, stdout=f,
                                                stderr=subprocess.STDOUT, env=env))
            _live.add(proc)
        try:
            code = proc.wait()
        except BaseException as e:  # Ctrl-C or the sweep's SIGTERM in this thread: stop the stage too
            stop_stages(stop_signal(e))
            raise
        finally:
            with _live_lock:
                _live.discard(proc)
    if stopping.is_set():
        raise Interrupted(stage)
    if code != 0:
        raise StepFailed(stage, code, log)
    return time.time() - started


def _call(module: str, argv: list[str], log: Path, stage: str) -> float:
    """Run ``python -m MODULE ARGV`` in this process (saves a start-up of torch, transformers and DeepSpeed per
    run), appending its output to ``log``; its wall seconds, or StepFailed."""
    started = time.time()
    entry = importlib.import_module(module).main  # outside the redirect: loggers made at import keep sys.stdout
    with open(log, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print(f"$ python -m {module} {shlex.join(argv)}", flush=True)
        try:
            code = entry(argv)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
        except Exception:  # one broken run must not end the sweep
            traceback.print_exc()
            code = 1
        finally:  # not imported again here: an interrupt (Ctrl-C, SIGTERM) during the run's first import of
            # torch leaves it half loaded, and importing it again raised a SystemError over the interrupt
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_available():
                torch.cuda.empty_cache()  # the next run's training processes need the memory
    if code == INTERRUPTED_EXIT_CODE:  # a Ctrl-C that reached the tool (errors.cli_errors) stops the sweep
        stop_stages(signal.SIGINT)
        raise Interrupted(stage)
    if code:
        raise StepFailed(stage, code, log)
    return time.time() - started


class Stages:
    """How one run's stages execute. Training and fine-tuning are child processes, with the run slot's GPU under
    ``--parallel`` when there are several. Evaluation and export run in this process (saving a start-up of torch,
    transformers and DeepSpeed each), one at a time: ``call_lock`` is held while ``_call`` redirects this
    process's output into the run's log, so under ``--parallel`` the other threads print to the stream the sweep
    started with (``_Sweep.stdout``), never to a redirected one."""

    def __init__(self, plan: Plan, slot: int = 0, call_lock: threading.Lock | None = None):
        self.env, self.call_lock = None, call_lock or contextlib.nullcontext()
        if plan.parallel > 1:
            import torch
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count > 1 and "CUDA_VISIBLE_DEVICES" not in os.environ:
                self.env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(slot % count)}

    def process(self, cmd: list[str], log: Path, stage: str) -> float:
        return _run(cmd, log, stage, self.env)

    def module(self, module: str, argv: list[str], log: Path, stage: str) -> float:
        with self.call_lock:
            return _call(module, argv, log, stage)


def add_seconds(run_dir: Path, stage: str, seconds: float) -> None:
    """Per-stage wall seconds, summed over sweep invocations (an interrupted run resumes and adds)."""
    path = run_dir / "sweep_seconds.json"
    times = json.loads(path.read_text()) if path.is_file() else {}
    times[stage] = times.get(stage, 0.0) + seconds
    path.write_text(json.dumps(times) + "\n")


def free_name(path: Path, suffix: str) -> Path:
    """``path`` + ``suffix``, or + ``suffix-2``, ``-3``... : the first that does not exist."""
    candidate, n = path.with_name(path.name + suffix), 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}{suffix}-{n}")
    return candidate
