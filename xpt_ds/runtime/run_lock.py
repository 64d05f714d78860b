"""One job per run directory: rank 0 holds an exclusive ``flock`` on ``RUN_DIR/.run.lock`` while it runs.

Two jobs writing one run directory (the same job submitted twice, a requeue while the old allocation's ranks are
still alive) interleave checkpoints and logs and lose rows. The kernel drops the lock when rank 0 and the
DataLoader workers it forked (they share the open file) have ended, however they end, so a killed job leaves
nothing to clean up; the file only records who held it last. On a file system without locks (some Lustre
mounts) the run goes on with a warning. Where the recorded holder ran on this host and has ended, what still
holds the lock is something it forked, which ends soon after it (workers die with their rank:
``xpt_ds.data.workers.start_worker``): a new job waits up to ``ENDED_HOLDER_WAIT_S`` for that, and else names
those processes.

The lock is also how a new job knows that a status.json still saying 'running' (``xpt_ds.runtime.status``) is a
dead attempt's: any live writer would hold the lock. The job that takes it says so (``claim_run``), and its own
status replaces that one once it is set up.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import socket
import time
from pathlib import Path
from typing import IO

import psutil

from xpt_ds.errors import UserError

log = logging.getLogger(__name__)

LOCK_NAME = ".run.lock"
ENDED_HOLDER_WAIT_S = 30.0  # for the processes an ended holder forked (DataLoader workers: 5 s at most in torch)


class RunInUse(UserError):
    """Another live process holds the run directory's lock."""


def hold(run_dir: Path, name: str = LOCK_NAME, command: str = "xpt-ds train", what: str = "run directory",
         other: str = "run_dir") -> IO | None:
    """Lock ``run_dir`` (made if missing; a ``what`` written by one ``command`` at a time, whose ``other`` option
    names another) for as long as the returned file stays open: keep it until the process ends. RunInUse names
    the holder when another process has it (a holder of this host that has ended: once what it forked has held
    the lock for ENDED_HOLDER_WAIT_S); None where the file system has no locks."""
    run_dir.mkdir(parents=True, exist_ok=True)
    f = open(run_dir / name, "a+", encoding="utf-8")
    deadline = None
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                f.close()
                log.warning("cannot lock %s (%s): nothing stops a second job from writing into this %s",
                            run_dir / name, e.strerror or e, what)
                return None
        f.seek(0)
        holder = f.read().strip() or "another process"
        ended = _ended_here(holder)
        if ended and deadline is None:
            deadline = time.monotonic() + ENDED_HOLDER_WAIT_S
            log.warning("%s %s: %s has ended, and processes it forked still hold its lock; waiting up to %g s for "
                        "them to end", what, run_dir, holder, ENDED_HOLDER_WAIT_S)
        if not ended or time.monotonic() >= deadline:
            f.close()
            if ended:
                pids = ", ".join(map(str, _holding(run_dir / name))) or "not visible to this user"
                holder = (f"processes that {holder} forked (pid(s) {pids}), still alive {ENDED_HOLDER_WAIT_S:g} s "
                          f"after it ended")
            raise RunInUse(f"{what} {run_dir} is in use by {holder}: one job writes a {what} at a time "
                           f"(stop that one first, or give this one another {other})") from None
        time.sleep(0.1)
    f.seek(0)
    f.truncate()
    f.write(f"{command} (pid {os.getpid()} on {socket.gethostname()}, since "
            f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')})\n")
    f.flush()
    return f


def _ended_here(holder: str) -> bool:
    """Whether the process a lock file's ``holder`` line names ran on this host and has ended (a zombie included);
    False for a live one, another host's, or a line that names none."""
    found = re.search(r"\(pid (\d+) on (.+?), since ", holder)
    if found is None or found.group(2) != socket.gethostname():
        return False
    try:
        return psutil.Process(int(found.group(1))).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def _holding(path: Path) -> list[int]:
    """The other processes of this host with ``path`` open (those this user may look into)."""
    want = os.stat(path)
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if any(os.path.samestat(os.stat(fd), want) for fd in (proc / "fd").iterdir()):
                pids.append(int(proc.name))
        except OSError:  # ended meanwhile, or not this user's
            continue
    return sorted(pids)


def claim_run(cfg, fresh: bool) -> tuple[IO | None, str | None]:
    """(rank 0's lock on ``cfg.run_dir``, or None; the line every rank stops on, or None): another live job holds
    the run directory, or a rank's resolved config differs from rank 0's (each node's launcher passes its own
    overrides). ``fresh``: the run directory did not exist before this attempt; when this process made it, locked
    it and stops here, it is removed again. A directory another job locked is never touched."""
    import deepspeed
    import torch.distributed as dist

    from xpt_ds.config import to_dict
    from xpt_ds.runtime.status import previous_attempt, remove_unstarted
    lock, problem = None, None
    if deepspeed.comm.get_rank() == 0:
        try:
            lock = hold(Path(cfg.run_dir))
            if (note := previous_attempt(Path(cfg.run_dir))) is not None:  # a 'running' status nobody writes
                log.warning(note)
        except RunInUse as e:
            problem = str(e)
        except OSError:
            pass  # an unwritable run_dir: the trainer's own checks name it
    every = [(problem, to_dict(cfg))]
    if dist.get_world_size() > 1:
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, (problem, to_dict(cfg)))
    problem = every[0][0] or config_difference([c for _, c in every])
    if problem is not None and lock is not None and fresh:
        remove_unstarted(Path(cfg.run_dir))  # this process made it and holds it: nothing else is in it
    return lock, problem


def config_difference(configs: list[dict]) -> str | None:
    """One line naming the first rank whose resolved config (``to_dict``) differs from rank 0's and the keys that
    differ: each node's launcher passes its own overrides, and a node given other ones would otherwise train
    with them unnoticed (another micro batch, another learning rate) while config.yaml records rank 0's."""
    from xpt_ds.config.values import flatten
    flat = [flatten(c) for c in configs]
    for rank, other in enumerate(flat[1:], start=1):
        keys = sorted(k for k in flat[0].keys() | other.keys() if flat[0].get(k) != other.get(k))
        if keys:
            shown = "; ".join(f"{k}: {flat[0].get(k)!r} vs {other.get(k)!r}" for k in keys[:3])
            more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
            return (f"rank {rank}'s config differs from rank 0's ({shown}{more}): every node must be given the same "
                    "config and overrides")
    return None
