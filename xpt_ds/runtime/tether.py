"""A command that does not outlive the process that started it: ``python -m xpt_ds.runtime.tether FD COMMAND ...``.

Rank 0 runs DeepSpeed's checkpoint conversion in a session of its own (``xpt_ds.checkpoint.universal``), so that its
time limit can stop the conversion and every worker process it started with one ``killpg``. A session of its own is
also out of reach of whatever ends rank 0: after a ``kill -9`` of rank 0 (an out-of-memory kill, a launcher's or a
node's cleanup) the conversion went on, holding its workers' memory and writing into the folder that the next
attempt converts into again. So the parent starts this module as the session's leader (``tethered``), with the
read end of a pipe whose write end only the parent holds. It runs COMMAND in its own process group and, once the
pipe reads end-of-file (the parent closed it, or died in any way), kills that group, itself included. Its exit
status is COMMAND's (128 + N for a command ended by signal N). It imports nothing heavy: it starts in milliseconds.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from typing import Iterator


@contextlib.contextmanager
def tethered(cmd: list[str], **popen) -> Iterator[subprocess.Popen]:
    """``subprocess.Popen(cmd, **popen)`` in a session of its own, ended (its whole process group) when this process
    ends however it ends, or when the block is left with it still running. The ``Popen`` is the tether's: killing its
    process group (``os.killpg(proc.pid, ...)``) kills the command with it."""
    read_end, write_end = os.pipe()  # both close-on-exec; only the read end is passed on
    try:
        proc = subprocess.Popen([sys.executable, "-m", __name__, str(read_end), *cmd], pass_fds=(read_end,),
                                start_new_session=True, **popen)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    try:
        yield proc
    finally:
        os.close(write_end)  # end-of-file: a tether still running kills its group
        if proc.poll() is None:
            kill_group(proc.pid)
        proc.wait(timeout=60)  # SIGKILLed: at once; an error, not a hang, if it were not


def kill_group(pgid: int) -> None:
    """SIGKILL to process group ``pgid`` (a tether's is its pid; 0 is the caller's own), unless it has ended."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _watch(fd: int) -> None:
    while os.read(fd, 1024):  # nobody writes: only end-of-file returns
        continue
    _end_group()


def _end_group(*_) -> None:
    kill_group(0)


def main(argv: list[str]) -> int:
    fd, cmd = int(argv[0]), argv[1:]
    for sig in (signal.SIGTERM, signal.SIGHUP):  # the tether itself stopped: the command goes with it
        signal.signal(sig, _end_group)
    child = subprocess.Popen(cmd)  # this process group (this session's), stdin, stdout and stderr
    threading.Thread(target=_watch, args=(fd,), daemon=True).start()
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
