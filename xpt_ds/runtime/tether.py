"""A command that does not outlive the process that started it:
``python -m xpt_ds.runtime.tether FD [--ranks MODULE --grace S] -- COMMAND ...``.

Rank 0 runs DeepSpeed's checkpoint conversion in a session of its own (``xpt_ds.checkpoint.universal``), so that its
time limit can stop the conversion and every worker process it started with one ``killpg``. A session of its own is
also out of reach of whatever ends rank 0: after a ``kill -9`` of rank 0 (an out-of-memory kill, a launcher's or a
node's cleanup) the conversion went on, holding its workers' memory and writing into the folder that the next
attempt converts into again. So the parent starts this module as the session's leader (``tethered``), with the
read end of a pipe whose write end only the parent holds. It runs COMMAND in its own process group and, once the
pipe reads end-of-file (the parent closed it, or died in any way), kills that group, itself included. Its exit
status is COMMAND's (128 + N for a command ended by signal N).

A sweep's training runs stop another way (``xpt_ds.sweeps.stages``): a run checkpoints before it exits on SIGTERM
or Ctrl-C, but the deepspeed launcher on one node dies of a SIGTERM and leaves its ranks training, so a signal to
the launcher stops nothing. With ``--ranks MODULE`` the tether passes each stop signal it gets (SIGTERM, SIGINT,
SIGUSR1; SIGHUP and the pipe's end-of-file as SIGTERM) to the processes below it that run ``python -m MODULE``
(the ranks, not their forked DataLoader workers), and ``--grace`` seconds after the first one kills every process
below it, and its group. If no rank has started yet it kills them at once, as it does when the parent dies during a
stop (whoever stopped it gave up waiting: a ``kill -9`` after a ``kill``). Once ranks have run (it looks for them
every second until it has seen one), a stop that finds none left (they checkpointed and exited, and the launcher has
yet to notice: DeepSpeed's ``launch.py`` polls once a second) only starts the grace, so COMMAND ends with the ranks'
status (124 or 130 after a second SIGTERM or Ctrl-C, not 137).
Processes left below it when COMMAND ends are killed then (the tether is their subreaper: they stay below it).
It imports psutil and nothing heavy.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Iterator

import psutil


@contextlib.contextmanager
def tethered(cmd: list[str], ranks: str | None = None, grace_s: float = 0.0, **popen) -> Iterator[subprocess.Popen]:
    """``subprocess.Popen(cmd, **popen)`` in a session of its own, ended (its whole process group) when this process
    ends however it ends, or when the block is left with it still running. The ``Popen`` is the tether's: killing its
    process group (``os.killpg(proc.pid, ...)``) kills the command with it. ``ranks`` (a module name): a stop
    signal sent to the tether, or this process's end, reaches the processes below it that run ``python -m ranks``
    instead, and what is left of the command is killed ``grace_s`` seconds later."""
    read_end, write_end = os.pipe()  # both close-on-exec; only the read end is passed on
    stop = ["--ranks", ranks, "--grace", str(grace_s)] if ranks else []
    try:
        proc = subprocess.Popen([sys.executable, "-m", __name__, str(read_end), *stop, "--", *cmd],
                                pass_fds=(read_end,), start_new_session=True, **popen)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    try:
        yield proc
    finally:
        os.close(write_end)  # end-of-file: a tether still running kills what is below it
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if proc.poll() is None:  # its group, at least
            kill_group(proc.pid)
        proc.wait(timeout=60)  # SIGKILLed: at once; an error, not a hang, if it were not


def kill_group(pgid: int) -> None:
    """SIGKILL to process group ``pgid`` (a tether's is its pid; 0 is the caller's own), unless it has ended."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _below() -> dict[int, psutil.Process]:
    """Every live process below the tether (its children, theirs, ...). A torchrun's workers are in sessions of
    their own, out of its group: found here all the same."""
    found = {}
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # ended meanwhile
            if proc.status() != psutil.STATUS_ZOMBIE:  # a zombie has ended: only its parent's wait is missing
                found[proc.pid] = proc
    return found


def _runs(args: list[str], module: str) -> bool:
    """Whether command line ``args`` is ``python [options] -m module ...`` (not a command that names it later)."""
    i = 1
    while i < len(args) and args[i].startswith("-") and args[i] != "-c":
        if args[i] == "-m":
            return args[i + 1:i + 2] == [module]
        i += 2 if args[i] in ("-X", "-W") else 1
    return False


def _ranks(module: str) -> list[int]:
    """The processes below the tether that run ``python -m module``, less those forked by one of them (DataLoader
    workers, which have the same command line)."""
    lines = {}
    for pid, proc in _below().items():
        with contextlib.suppress(psutil.Error):
            lines[pid] = (proc.ppid(), proc.cmdline())
    return [pid for pid, (ppid, args) in lines.items()
            if _runs(args, module) and not (ppid in lines and _runs(lines[ppid][1], module))]


class _Stop:
    """What the tether does when it is stopped (a signal, or the pipe's end-of-file)."""

    def __init__(self, ranks: str | None, grace_s: float):
        self.ranks, self.grace_s = ranks, grace_s
        self.timer: threading.Timer | None = None
        self.seen = False  # whether a rank has run: then a stop that finds none has nothing to wait for but COMMAND
        self.lock = threading.RLock()  # the watcher thread, and handlers that a second signal may nest

    def __call__(self, sig: int, frame=None) -> None:
        with self.lock:
            pids = _ranks(self.ranks) if self.ranks else []
            self.seen = self.seen or bool(pids)
            if not self.seen:  # nothing started a rank yet: nothing would checkpoint
                _kill_all()
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM if sig == signal.SIGHUP else sig)
            if self.timer is None:
                self.timer = threading.Timer(self.grace_s, _kill_all)
                self.timer.daemon = True
                self.timer.start()

    def look(self, every_s: float = 1.0) -> None:
        """Until a rank has been seen, look for one every ``every_s`` seconds (a thread of its own), so that ranks
        that ran and exited before the first stop (a run that ended, its launcher still polling) count too."""
        while not self.seen:
            with contextlib.suppress(psutil.Error, OSError):
                self.seen = bool(_ranks(self.ranks))
            if not self.seen:
                time.sleep(every_s)

    def parent_gone(self) -> None:
        with self.lock:
            if self.timer is not None:  # during a stop: now
                _kill_all()
        self(signal.SIGTERM)


def _kill_below(outside_group: bool = False) -> None:
    for proc in _below().values():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if not outside_group or os.getpgid(proc.pid) != os.getpgid(0):
                proc.kill()


def _kill_all() -> None:
    """SIGKILL to every process below the tether: those outside its group first, then the group, itself included,
    at once (killed one by one, COMMAND could end first and the tether return its status)."""
    _kill_below(outside_group=True)
    kill_group(0)


def _subreaper() -> None:
    """Orphans below the tether (a rank whose launcher died) become its children, not init's: still below it."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: they are found while their parents live
        import ctypes
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _watch(fd: int, stop: _Stop) -> None:
    while os.read(fd, 1024):  # nobody writes: only end-of-file returns
        continue
    stop.parent_gone()


def main(argv: list[str]) -> int:
    fd, split = int(argv[0]), argv.index("--")
    options, cmd = dict(zip(argv[1:split:2], argv[2:split:2])), argv[split + 1:]
    stop = _Stop(options.get("--ranks"), float(options.get("--grace", 0)))
    if os.getsid(0) != os.getpid():  # started otherwise than by ``tethered``: its kills must not reach the caller
        with contextlib.suppress(PermissionError):  # already a process group's leader (a shell's job): its own
            os.setsid()
    # the tether itself stopped: the command goes with it (its ranks, given --ranks, are asked to stop first)
    for sig in (signal.SIGTERM, signal.SIGHUP) + ((signal.SIGINT, signal.SIGUSR1) if stop.ranks else ()):
        signal.signal(sig, stop)
    _subreaper()
    child = subprocess.Popen(cmd)  # this process group (this session's), stdin, stdout and stderr
    threading.Thread(target=_watch, args=(fd, stop), daemon=True).start()
    if stop.ranks:
        threading.Thread(target=stop.look, daemon=True).start()
    code = child.wait()
    _kill_below()  # what is left of it: a launcher ends once its ranks have
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
