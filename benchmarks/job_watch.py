"""Running a benchmark's job and watching it: its processes' memory from ``/proc/PID/smaps_rollup`` every 0.2 s
(each process's ``Pss_Anon`` and ``Pss_File``, a rank counted with the DataLoader workers it forks), a kill of the
whole process tree above a cap or at a log line, and the times of a trainer's log lines and steps.
``bench_build.py`` and ``bench_big_gpu.py`` measure their rows with it."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

from build_report import GIB  # this folder's

REPO = Path(__file__).resolve().parents[1]
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _status(pid: int) -> tuple[str, int, int] | None:
    """(command line, Pss_Anon bytes, Pss_File bytes) of ``pid``, or None when it is gone. Proportional: a page
    two processes share (a DataLoader worker forked from its rank, the page cache of a file both map) counts half
    in each, so the processes' figures add up to what the machine holds."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    kb = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in text.splitlines()[1:])
          if k in ("Pss_Anon", "Pss_File")}
    return cmd, kb.get("Pss_Anon", 0) * 1024, kb.get("Pss_File", 0) * 1024


class Sampler(threading.Thread):
    """Samples a process tree's memory every ``period`` s; kills the tree when it owns more than ``cap`` bytes, or
    once its log ``log`` holds a line matching ``stop_at`` (what was to be measured is done)."""

    def __init__(self, root: int, cap: int, log: Path, stop_at: str | None = None, period: float = 0.2):
        super().__init__(daemon=True)
        self.root, self.cap, self.period = root, cap, period
        self.log, self.stop_at, self.stopped = log, re.compile(stop_at) if stop_at else None, None
        self.samples: list[tuple[float, int, int, int, int]] = []  # (time, pid, ppid-is-launcher, anon, file)
        self.killed: tuple[float, int] | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            now, total = time.time(), 0
            for pid in _tree(self.root):
                st = _status(pid)
                if st is None:
                    continue
                cmd, anon, file = st
                self.samples.append((now, pid, _rank_of(pid, cmd), anon, file))
                total += anon
            if total > self.cap and self.killed is None:
                self.killed = (now, total)
                kill_tree(self.root)
            if self.stop_at is not None and self.stopped is None and self.stop_at.search(
                    self.log.read_text(errors="replace")):
                self.stopped = now
                kill_tree(self.root)
            self.done.wait(self.period)


def kill_tree(root: int) -> None:
    """SIGKILL ``root`` and every process below it (torchrun's ranks run in sessions of their own, so the launcher's
    process group is not all of them), and wait until none is left."""
    pids = _tree(root)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # it exited already
            continue
    deadline = time.time() + 30
    while time.time() < deadline and any(Path(f"/proc/{pid}").exists() and _status(pid) is not None
                                         for pid in pids[1:]):
        time.sleep(0.1)


def _rank_of(pid: int, cmd: str) -> int:
    """The rank a process of the job belongs to (its RANK; a DataLoader worker inherits its rank's), -1 for a
    launcher, -2 for anything else."""
    if "xpt_ds.cli.train" not in cmd and "xpt_ds.cli.export" not in cmd and "from_pretrained" not in cmd:
        return -2
    if "torch.distributed.run" in cmd:
        return -1
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return -2
    for item in env:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return 0


def peaks(samples, start: float = 0.0, end: float = float("inf")) -> dict:
    """Per rank, the largest Pss_Anon and Pss_File of the rank's processes together (the rank and the DataLoader
    workers it forked, which inherit its RANK: a page they share counts once in all), between ``start`` and
    ``end``; and the largest sum over every process of the job."""
    per: dict[tuple[float, int], list[int]] = {}
    by_time: dict[float, int] = {}
    for t, _, rank, a, f in samples:
        if not start <= t <= end:
            continue
        by_time[t] = by_time.get(t, 0) + a
        if rank >= 0:
            cell = per.setdefault((t, rank), [0, 0])
            cell[0] += a
            cell[1] += f
    out = {"ranks": {}}
    for (t, rank), (a, f) in sorted(per.items()):
        best = out["ranks"].setdefault(rank, {"anon_gib": 0.0, "file_gib": 0.0})
        best["anon_gib"] = max(best["anon_gib"], a / GIB)
        best["file_gib"] = max(best["file_gib"], f / GIB)
    out["ranks"] = dict(sorted(out["ranks"].items()))
    out["job_anon_gib"] = max(by_time.values(), default=0) / GIB
    return out


def run_job(cmd: list[str], env: dict, log: Path, cap: int, timeout: float, cwd: Path = REPO,
            stop_at: str | None = None) -> dict:
    """Run ``cmd`` (in ``cwd``: ``python -m`` puts it first on the path, so it picks the checkout), sampling its
    processes' memory; stop it once its output matches ``stop_at``."""
    started = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        sampler = Sampler(proc.pid, cap, log, stop_at)
        sampler.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            rc = proc.wait()
            sampler.killed = sampler.killed or (time.time(), -1)
        sampler.done.set()
        sampler.join()
    return {"rc": rc, "started": started, "ended": time.time(), "samples": sampler.samples,
            "killed": sampler.killed, "stopped": sampler.stopped}


def timeline(samples, started: float, points: int = 400) -> list[list[float]]:
    """(seconds since start, rank 0's Pss_Anon GiB (with its workers), the job's Pss_Anon GiB), at most ``points``
    rows."""
    rows: dict[float, list[float]] = {}
    for t, _, rank, a, _ in samples:
        row = rows.setdefault(t, [round(t - started, 1), 0.0, 0.0])
        row[2] += a / GIB
        if rank == 0:
            row[1] += a / GIB
    out = [rows[t] for t in sorted(rows)]
    step = max(1, len(out) // points)
    return [[r[0], round(r[1], 2), round(r[2], 2)] for r in out[::step]]


def log_times(log: Path) -> list[tuple[float, str]]:
    """(epoch seconds, message) of every line the trainer logged with a timestamp."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = LOG_TIME.match(line)
        if m:
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append((t, line[m.end():]))
    return out


def step_times(run_dir: Path) -> dict[int, float]:
    """Step -> the time metrics.jsonl logged it (log_every 1: right after the step)."""
    out = {}
    path = run_dir / "metrics.jsonl"
    for line in (path.read_text().splitlines() if path.is_file() else []):
        row = json.loads(line)
        if "train/loss" in row:
            out[row["step"]] = row["time"]
    return out


def first(lines: list[tuple[float, str]], pattern: str, after: float = 0.0) -> float | None:
    rx = re.compile(pattern)
    return next((t for t, msg in lines if t >= after and rx.search(msg)), None)
