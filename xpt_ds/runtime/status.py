"""RUN_DIR/status.json: where the run stands, for a person (`cat`, `xpt-ds status RUN_DIR`) or a script
(``read_status``). Rank 0 only, rewritten atomically at every log step, checkpoint and exit.

A run whose rank 0 is killed (SIGKILL, an out-of-memory kill, a lost node) cannot write its end: its file keeps
saying 'running'. So the file also names its writer (``writer``: host, pid, when that process started, the host's
boot id) and a ``heartbeat`` time that a thread of the trainer renews every ``heartbeat_every_s`` (HEARTBEAT_S)
while the state is 'running'. ``read_status`` tells a live run from a dead one: on the writer's own host the
process is looked up (gone, a zombie, or its pid now another process's: dead); from another host only the
heartbeat's age can tell, and more than ``stale_after_s`` (STALE_HEARTBEATS beats, at least STALE_AFTER_S) without
one reads as dead. A dead run reads as state 'died', with ``died`` saying since when. The run lock
(``run_lock``) is the authority for a new job on the same run directory: holding it, the job knows any 'running'
writer before it is gone, and says so as it takes over.
"""
from __future__ import annotations

import datetime
import errno
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

from xpt_ds.io.paths import write_text_atomic

STATUS_NAME = "status.json"
HEARTBEAT_S = 60.0  # the trainer's heartbeat period: one small file rewrite a minute
STALE_HEARTBEATS = 5  # a heartbeat thread can be late (a file system stall, a busy host): five missed beats, ...
STALE_AFTER_S = 300.0  # ... and at least five minutes, before a writer on another host counts as dead
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
STATES = ("running", "preempted", "interrupted", "halted", "failed", "finished")  # what the trainer writes


def _now() -> str:
    return time.strftime(TIME_FORMAT)


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None: no such process, or no /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()  # the name in parentheses may hold spaces and ')'


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")  # 'pid:[4026531836]': containers on one host each have their own
    except OSError:
        return None


def writer_identity() -> dict:
    """This process as status.json names its writer: host, pid, start time (``since``, and ``proc_start``, the
    kernel's clock ticks since boot, which tell it from a later process given the same pid), the host's boot id
    and the pid namespace (None each where there is no /proc)."""
    stat = _proc_stat(os.getpid())
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": _process_start(stat),
            "proc_start": int(stat[19]) if stat else None, "boot_id": _read("/proc/sys/kernel/random/boot_id"),
            "pid_ns": _pid_namespace()}


def _process_start(stat: list[str] | None) -> str:
    """When this process started (boot time + its start ticks), for a person; now where /proc cannot say."""
    try:
        btime = next(int(ln.split()[1]) for ln in _read("/proc/stat").splitlines() if ln.startswith("btime "))
        return time.strftime(TIME_FORMAT, time.localtime(btime + int(stat[19]) / os.sysconf("SC_CLK_TCK")))
    except (AttributeError, StopIteration, TypeError, ValueError, OSError):
        return _now()


def _record(fields: dict, writer: dict, every: float | None) -> str:
    status = {**fields, "writer": writer, "heartbeat": _now()}
    if every is not None:
        status["heartbeat_every_s"] = every
    return json.dumps(status, indent=2) + "\n"


def write_status(run_dir: Path, **fields) -> None:
    """One write, no heartbeat: a process that records how a run stopped (``mark_stopped``)."""
    _write(run_dir / STATUS_NAME, _record({"updated": _now(), **fields}, writer_identity(), None))


def _write(path: Path, text: str) -> None:
    """``write_text_atomic``, or on a full disk (or quota), where the file beside it cannot be made, ``text``
    written over the blocks ``path`` already holds: a run that fails because its disk filled up then says so
    (``failed``, with its error) instead of staying ``running`` until ``xpt-ds status`` calls it dead. A reader
    may see that one write half done (``xpt-ds status`` says a file it cannot read is not a trainer's)."""
    try:
        write_text_atomic(path, text)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT) or not _overwrite(path, text.encode("utf-8")):
            raise


def _overwrite(path: Path, data: bytes) -> bool:
    """``data`` written over ``path`` in place, cut to its length, when it fits in the blocks the file holds (so
    that no write needs a new one and none leaves the file half old, half new); False if it does not fit or the
    write fails (a copy-on-write file system writes no block in place)."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        if len(data) > os.fstat(fd).st_blocks * 512:
            return False
        done = 0
        while done < len(data):
            done += os.pwrite(fd, data[done:], done)
        os.ftruncate(fd, len(data))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class StatusFile:
    """Rank 0's status.json while it trains. ``write`` replaces the fields (``updated``: now); while the state is
    'running', a daemon thread rewrites the same fields every ``every`` seconds with a new ``heartbeat``. Both go
    through one lock, so a beat never writes older fields over newer ones. ``close`` stops the beats."""

    def __init__(self, run_dir: Path, every: float = HEARTBEAT_S):
        self.path, self.every = Path(run_dir) / STATUS_NAME, every
        self.writer = writer_identity()
        self._fields: dict = {}
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread: threading.Thread | None = None

    def write(self, **fields) -> None:
        with self._lock:
            self._fields = {"updated": _now(), **fields}
            _write(self.path, _record(self._fields, self.writer, self.every))
        if fields.get("state") == "running" and self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._beat, name="status-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            with self._lock:
                if self._fields.get("state") != "running":
                    continue
                try:
                    _write(self.path, _record(self._fields, self.writer, self.every))
                except OSError:  # a full or unreachable disk: the next beat tries again, readers see the age
                    pass

    def close(self) -> None:
        self._stop.set()


def _age_s(stamp: str | None, now: float) -> float | None:
    try:
        return now - datetime.datetime.strptime(stamp, TIME_FORMAT).timestamp()
    except (TypeError, ValueError):
        return None


def stale_after_s(status: dict) -> float:
    return max(STALE_AFTER_S, STALE_HEARTBEATS * float(status.get("heartbeat_every_s") or HEARTBEAT_S))


def _alive(writer: dict) -> bool:
    """Whether the writer's pid is still that process, alive: seen from its own host, boot and pid namespace."""
    pid = writer.get("pid")
    if not isinstance(pid, int):
        return False
    if not Path("/proc/self/stat").exists():  # no /proc (macOS): the kernel can say whether the pid exists
        try:
            os.kill(pid, 0)
        except PermissionError:  # another user's process
            return True
        except OSError:
            return False
        return True
    stat = _proc_stat(pid)
    if stat is None or stat[0] == "Z":  # gone, or a zombie its parent has not reaped yet
        return False
    return writer.get("proc_start") is None or int(stat[19]) == writer["proc_start"]


def writer_gone(status: dict, now: float | None = None) -> str | None:
    """Why a 'running' status.json's writer is dead ('no heartbeat since T: ...'), or None while it may live.
    Files written before heartbeats (no ``writer``) are taken at their word."""
    writer, beat = status.get("writer"), status.get("heartbeat")
    if not isinstance(writer, dict) or "heartbeat_every_s" not in status:
        return None
    who, since = f"rank 0 (pid {writer.get('pid')} on {writer.get('host')})", f"no heartbeat since {beat}"
    if writer.get("host") == socket.gethostname():
        if writer.get("boot_id") not in (None, _read("/proc/sys/kernel/random/boot_id")):
            return f"{since}: {writer['host']} restarted after {who} wrote it"
        if writer.get("pid_ns") == _pid_namespace():  # the same process table: look the pid up
            return None if _alive(writer) else f"{since}: {who} is gone"
    age = _age_s(beat, time.time() if now is None else now)  # another host (or container): the heartbeat's age
    limit = stale_after_s(status)
    if age is not None and age > limit:
        return (f"{since} ({age / 60:.0f} min; a live run renews it every {status['heartbeat_every_s']:.0f} s, "
                f"taken as dead after {limit:.0f} s): {who} is gone")
    return None


def read_status(run_dir: Path, now: float | None = None) -> dict:
    """RUN_DIR/status.json as written ({} when there is none or it cannot be read), except that a 'running' one
    whose writer is dead (``writer_gone``) has state 'died', ``died`` saying why, ``recorded_state`` 'running'."""
    try:
        status = json.loads((Path(run_dir) / STATUS_NAME).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(status, dict):
        return {}
    if status.get("state") == "running":
        why = writer_gone(status, now)
        if why is not None:
            return {**status, "state": "died", "died": why, "recorded_state": "running"}
    return status


def status_problem(run_dir: Path) -> str | None:
    """Why RUN_DIR's status.json, which exists, is no status the trainer writes (not JSON, not an object, an
    unknown state), or None; ``read_status`` reads such a file as none, as a job on the run does (it rewrites it)."""
    path = Path(run_dir) / STATUS_NAME
    try:
        status = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{path} cannot be read ({e.strerror})"
    except ValueError as e:
        return f"{path} is not JSON ({e})"
    if not isinstance(status, dict):
        return f"{path} holds a {type(status).__name__}, not a JSON object"
    if status.get("state") not in STATES:
        return f"{path} has state {status.get('state')!r}, none of {', '.join(STATES)}"
    return None


def describe(status: dict, now: float | None = None) -> str:
    """One line for a person: the state, where the run is, and for a live run its writer and heartbeat's age."""
    if not status:
        return "no status (the run has not started, or its status.json cannot be read)"
    state = status.get("state", "?")
    where = (f"phase '{status.get('phase')}', global step {status.get('global_step')} of "
             f"{status.get('total_steps')}; last complete checkpoint {status.get('last_complete_checkpoint') or 'none'}"
             if status.get("global_step") is not None else "it stopped before its first step (no checkpoint)")
    if state == "died":
        return f"died ({status['died']}); {where}; the same command resumes from the newest complete checkpoint"
    if state == "running" and isinstance(status.get("writer"), dict):
        w, age = status["writer"], _age_s(status.get("heartbeat"), time.time() if now is None else now)
        beat = "" if age is None else f", heartbeat {max(age, 0):.0f} s ago"
        return f"running (pid {w.get('pid')} on {w.get('host')}{beat}); {where}"
    if state == "running":  # written before heartbeats (2026-11-29): it names no process to look up
        return (f"running, as an xpt-ds of before 2026-11-29 recorded it (last written {status.get('updated')}); "
                f"{where}; that version wrote no heartbeat, so whether it still runs cannot be told: if no job of "
                "this run is running, the same command resumes it")
    error = f": {status['error']}" if status.get("error") else ""
    return f"{state}{error}; {where}"


def previous_attempt(run_dir: Path) -> str | None:
    """What a job that has just locked ``run_dir`` (``run_lock.hold``) says of the attempt before it, whose
    status.json still says 'running': it died (any live writer would hold the lock), or, where its heartbeat is
    still fresh, a job on another node may still be writing here (a file system whose locks do not reach across
    nodes, Lustre's ``localflock``). None when the last attempt recorded how it stopped."""
    try:
        old = json.loads((Path(run_dir) / STATUS_NAME).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(old, dict) or old.get("state") != "running":
        return None
    checkpoint = old.get("last_complete_checkpoint")
    why = writer_gone(old)
    if why is not None or not isinstance(old.get("writer"), dict):
        return (f"the previous attempt on {run_dir} died while running ({why or 'it recorded no heartbeat'}; "
                f"its last complete checkpoint: {checkpoint}): this one takes over")
    w = old["writer"]
    return (f"{run_dir}/{STATUS_NAME} says pid {w.get('pid')} on {w.get('host')} is running this run (heartbeat "
            f"at {old.get('heartbeat')}), yet this job could lock it: if that job is alive, two jobs now write this "
            "run directory (a file system whose locks do not reach across nodes, or none); stop one of them")


def mark_stopped(run_dir: Path, state: str, error: str) -> None:
    """A run that stopped before its trainer could write its status (a bad shard, tokenizer or checkpoint found
    while it was being built): ``state`` and ``error`` replace what status.json said (a previous attempt's
    'running' or 'preempted'), its other fields (that attempt's steps and checkpoint) stay. Nothing is written
    into a run directory that does not exist."""
    path = run_dir / STATUS_NAME
    if not run_dir.is_dir():
        return
    try:
        old = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        old = {}
    dropped = ("updated", "writer", "heartbeat", "heartbeat_every_s")  # this process writes them anew
    kept = {k: v for k, v in old.items() if k not in dropped} if isinstance(old, dict) else {}
    write_status(run_dir, **{**kept, "state": state, "error": error})


UNSTARTED_FILES = {"embedding_init.json", ".run.lock"}  # what a run writes before its first checkpoint or log row
UNSTARTED_DIRS = {"scans"}  # and the records of its shard scans (xpt_ds.data.scan_records.SUBDIR), a cache


def remove_unstarted(run_dir: Path) -> bool:
    """Remove ``run_dir`` (made by this attempt, which failed before it was set up) when it holds nothing but
    empty folders, the embedding-init report and the records of its shard scans: a config or data error leaves no
    run directory behind. False, and nothing removed, when it holds anything else."""
    if not run_dir.is_dir():
        return True
    if any(p.is_symlink() or p.is_file() and p.name not in UNSTARTED_FILES
           and p.relative_to(run_dir).parts[0] not in UNSTARTED_DIRS for p in run_dir.rglob("*")):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return True


def planned_steps(state, phase_steps: list[int], phase_stopped: bool) -> int:
    """Optimizer steps done (``state``: the trainer's global_step, phase_index and phase_step) plus those still
    to run: the rest of the current phase (none once early stopping ended it, guard.early_stop_patience) and every
    later phase's planned steps."""
    current = 0 if phase_stopped else phase_steps[state.phase_index] - state.phase_step
    return state.global_step + current + sum(phase_steps[state.phase_index + 1:])

