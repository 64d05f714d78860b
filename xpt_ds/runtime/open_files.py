"""The open-file limit (``ulimit -n``): raised at start up to what the job may have, and named when it runs out.

A rank holds file descriptors for its shards, sockets, pipes to its DataLoader workers and, under torch's
``file_descriptor`` sharing strategy, one for each tensor a worker hands over while it is in flight. Under
``ulimit -n 64`` a tiny run with ``data.num_workers: 2`` failed in its first step with torch's
"Too many open files. Communication with the workers is no longer possible" and a 49-line traceback; with 128 it
trained (2026-12-05). Many clusters start jobs at a soft limit of 1,024 under a hard limit far above it, which a
process may raise itself without privileges: ``raise_soft_limit`` does so, before the workers fork (they inherit
it). Where the hard limit itself is what runs out, ``exhausted_line`` is the one line the run ends with.
"""
from __future__ import annotations

import errno
import logging
import resource
import sys

log = logging.getLogger(__name__)

WANTED = 65536  # as far as the soft limit is raised (where the hard limit allows): far above a rank's need


def limits() -> tuple[int, int]:
    """(soft, hard); an unlimited hard limit as ``resource.RLIM_INFINITY``."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def raise_soft_limit() -> tuple[int, int] | None:
    """Raise the soft limit towards ``WANTED``, as far as the hard limit lets an unprivileged process. Returns
    (old, new) when it moved, None when it was high enough or could not move."""
    soft, hard = limits()
    want = WANTED if hard == resource.RLIM_INFINITY else min(hard, WANTED)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):  # a kernel cap (nr_open) below the hard limit: keep the soft one
            return None
        return soft, want
    return None


def quiet_when_out() -> None:
    """Out of descriptors, multiprocessing's ``resource_sharer`` thread (it hands tensors' descriptors between a
    rank and its DataLoader workers) printed its own traceback through ``sys.excepthook`` before the rank's one
    line: EMFILE, or a broken pipe to a worker that ended for want of descriptors itself (its rank then ends
    with the line, or names the worker's end). This process's hook now drops exceptions that are the process
    running out (``ran_out``) and a connection lost in that thread. Idempotent."""
    if getattr(sys.excepthook, "quiet_when_out", False):
        return
    default = sys.excepthook

    def excepthook(kind, e, tb):
        if ran_out(e) or isinstance(e, ConnectionError) and _in_resource_sharer(tb):
            return
        default(kind, e, tb)

    excepthook.quiet_when_out = True
    sys.excepthook = excepthook


def _in_resource_sharer(tb) -> bool:
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith("resource_sharer.py"):
            return True
        tb = tb.tb_next
    return False


def say_raised(raised: tuple[int, int] | None) -> None:
    """The start-up line for what ``raise_soft_limit`` did (nothing when it did nothing)."""
    if raised is not None:
        log.info("open-file limit (ulimit -n) raised from %d to %d, as its hard limit allows", *raised)


def ran_out(e: BaseException) -> bool:
    """Whether ``e`` (or an exception it was raised from) is the process running out of file descriptors: an
    OSError EMFILE, or torch's DataLoader RuntimeError that reports one."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno == errno.EMFILE or "Too many open files" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def exhausted_line(num_workers: int) -> str:
    """The run's one error line when it ran out of file descriptors."""
    soft, hard = limits()
    hard_said = "unlimited" if hard == resource.RLIM_INFINITY else f"{hard:,}"
    workers = (f", or set data.num_workers below {num_workers} (each DataLoader worker hands batches over "
               "through descriptors)" if num_workers else "")
    return (f"this process ran out of open files: the limit (`ulimit -n`) is {soft:,}, its hard limit {hard_said}; "
            f"start the job with a higher one (`ulimit -n 65536`, or the cluster's setting){workers}")
