"""The stages' worker processes: a pool worker ends with the process that started it."""
from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int) -> None:
    """In a pool worker (not in the main process: it would then die with the shell that started it): on Linux ask
    for SIGTERM when ``parent``, the process that started the worker, dies, so a ``kill -9`` of prepare leaves no
    worker behind, blocked on its task queue for ever or printing BrokenPipe tracebacks. A no-op elsewhere. The
    signal follows the parent *thread*: pools are made in the thread that runs the stage."""
    # A result written to the dead parent's pipe raised BrokenPipeError, and the worker began printing its traceback
    # ("Process SpawnPoolWorker-1:") before the signal below ended it (1 kill in ~10, 2026-12-05): such a write ends
    # the worker at once and silently, as in a shell pipeline. Its other writes are to regular files.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if not sys.platform.startswith("linux"):
        return
    try:
        set_ok = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc prctl (another C library): the workers may outlive a kill
        return
    if set_ok and os.getppid() != parent:  # the parent died before prctl: no signal will come
        os.kill(os.getpid(), signal.SIGTERM)
