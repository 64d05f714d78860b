"""How a command's process ends: what interpreter shutdown does that anyone can observe, then ``os._exit``.

A rank has some 5,000 modules loaded (torch, DeepSpeed, transformers); tearing the interpreter down frees their
objects one by one, about 0.5 CPU-s a process on the 2-core dev VM (docs/testing.md), and then runs the C++
static destructors of the extension modules (a 2-rank ZeRO-3 test script's exit aborted once there, with
"terminate called without an active exception"). ``exit_process`` keeps what shutdown does for the program: it lets
non-daemon threads finish (``threading._shutdown``, which also ends executors' workers), runs the ``atexit``
handlers (logging's flush, multiprocessing's reaping of DataLoader workers, TensorBoard's writers), flushes stdout
and stderr, and exits with the status ``sys.exit`` would give.

The status is decided by then. A Ctrl-C while the handlers run is ignored: it raised in them, and each printed
"Exception ignored in atexit callback" with a traceback. The daemonic ``multiprocessing`` children still alive
(DataLoader workers that a shutdown cut short left behind; they ignore SIGTERM, ``xpt_ds.data.workers``) are
killed first: multiprocessing's handler would SIGTERM them and wait for them for ever.

Only a command's ``__main__`` calls it: ``main`` itself returns its status, so in-process callers (the tests, the
``xpt-ds`` dispatcher) keep running.
"""
from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import sys
import threading
from typing import NoReturn


def exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` exits with: None is 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    sys.stderr.write(f"{code}\n")
    return 1


def kill_daemonic_children(timeout: float = 10.0) -> None:
    """SIGKILL this process's daemonic ``multiprocessing`` children that are still alive, and reap them."""
    children = [p for p in multiprocessing.active_children() if p.daemon]
    for child in children:
        with contextlib.suppress(OSError, ValueError):
            child.kill()
    for child in children:
        with contextlib.suppress(OSError, ValueError):
            child.join(timeout)


def exit_process(code: object) -> NoReturn:
    status = exit_status(code)
    with contextlib.suppress(KeyboardInterrupt):  # a Ctrl-C stops the wait for the threads, as in Py_Finalize
        threading._shutdown()  # what Py_Finalize does first: threading's own atexit hooks, then join the others
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    kill_daemonic_children()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing left to say on it
            stream.flush()
    os._exit(status)
