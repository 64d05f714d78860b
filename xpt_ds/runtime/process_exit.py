"""How a command's process ends: what interpreter shutdown does that anyone can observe, then ``os._exit``.

A rank has some 5,000 modules loaded (torch, DeepSpeed, transformers); tearing the interpreter down frees their
objects one by one, about 0.5 CPU-s a process on the 2-core dev VM (docs/testing.md), and then runs the C++
static destructors of the extension modules (a 2-rank ZeRO-3 test script's exit aborted once there, with
"terminate called without an active exception"). ``exit_process`` keeps what shutdown does for the program: it lets
non-daemon threads finish (``threading._shutdown``, which also ends executors' workers), runs the ``atexit``
handlers (logging's flush, multiprocessing's reaping of DataLoader workers, TensorBoard's writers), flushes stdout
and stderr, and exits with the status ``sys.exit`` would give. Only a command's ``__main__`` calls it: ``main``
itself returns its status, so in-process callers (the tests, the ``xpt-ds`` dispatcher) keep running.
"""
from __future__ import annotations

import atexit
import contextlib
import os
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


def exit_process(code: object) -> NoReturn:
    status = exit_status(code)
    threading._shutdown()  # what Py_Finalize does first: threading's own atexit hooks, then join the others
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing left to say on it
            stream.flush()
    os._exit(status)
