"""xpt_ds.runtime.tether: a command in a session of its own that still ends with the process that started it."""
import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil

from xpt_ds.runtime.tether import tethered

# A command that starts a grandchild, as ds_to_universal starts its worker processes, and then waits for ever.
WAITS = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
         "print('up', flush=True); time.sleep(600)")

# A parent that tethers WAITS, says the tether's pid once the command is up, and then waits too: the test kills it.
PARENT = f"""import subprocess, sys, time
from xpt_ds.runtime.tether import tethered
with tethered([sys.executable, "-c", {WAITS!r}], stdout=subprocess.PIPE, text=True) as proc:
    assert proc.stdout.readline() == "up\\n"
    print(proc.pid, flush=True)
    time.sleep(600)
"""


def _group(pgid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def _wait_gone(pgid: int, seconds: float) -> list[psutil.Process]:
    deadline = time.time() + seconds
    while (left := _group(pgid)) and time.time() < deadline:
        time.sleep(0.05)
    return left


def _runs_after(p: psutil.Process, seconds: float) -> bool:
    """Whether ``p`` still runs after ``seconds``."""
    deadline = time.time() + seconds
    while p.is_running() and p.status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
        time.sleep(0.05)
    return p.is_running() and p.status() != psutil.STATUS_ZOMBIE


def test_a_parent_killed_with_sigkill_takes_the_command_and_its_children_with_it():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    pgid = None
    try:
        pgid = int(parent.stdout.readline())
        assert len(_group(pgid)) == 3  # the tether, the command, the command's child: a session of their own
        assert os.getsid(pgid) == pgid != os.getsid(parent.pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        left = _wait_gone(pgid, 10)
        assert not left, [p.cmdline() for p in left]
    finally:
        parent.kill()
        if pgid is not None:
            for p in _group(pgid):
                p.kill()


def test_the_exit_status_is_the_commands_and_leaving_the_block_ends_it():
    with tethered([sys.executable, "-c", "raise SystemExit(3)"]) as proc:
        proc.wait(timeout=30)
    assert proc.returncode == 3
    with tethered([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]) as proc:
        proc.wait(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    with tethered([sys.executable, "-c", WAITS], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline() == "up\n"
    assert proc.returncode == -signal.SIGKILL  # the tether's group killed on the way out: nothing of it is left
    assert not _wait_gone(proc.pid, 10)


def test_a_tether_stopped_by_sigterm_ends_its_command():
    with tethered([sys.executable, "-c", WAITS], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline() == "up\n"
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        assert not _wait_gone(proc.pid, 10)


# A sweep's training stage, in miniature: a launcher (which would die of a SIGTERM, as the deepspeed launcher on one
# node does) starts two ranks, one of them in a session of its own (as torchrun starts its workers). ``-m rank``: a
# rank that checkpoints on SIGTERM or SIGINT (writes which one it got, after 0.5 s) and forks a DataLoader-like
# worker with its command line; ``-m rank stubborn``: one that ignores both.
RANK = """import os, signal, sys, time
out = sys.argv[-1]
if os.fork() == 0:  # a forked worker: the same command line, and it must not be signalled
    signal.signal(signal.SIGTERM, lambda s, f: open(out + ".worker", "w").write(str(s)))
    time.sleep(600)
    os._exit(0)
def save(s, f):
    time.sleep(0.5)
    open(out, "w").write(signal.Signals(s).name)
    os._exit(0)
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN if "stubborn" in sys.argv else save)
print("up", flush=True)
time.sleep(600)
"""

LAUNCHER = """import subprocess, sys
a = subprocess.Popen([sys.executable, "-m", "rank", sys.argv[1]], stdout=subprocess.PIPE, text=True)
b = subprocess.Popen([sys.executable, "-m", "rank", "stubborn", sys.argv[2]], stdout=subprocess.PIPE, text=True,
                     start_new_session=True)
assert a.stdout.readline() == b.stdout.readline() == "up\\n"
print("up", flush=True)
a.wait(), b.wait()
"""

STAGE_PARENT = f"""import subprocess, sys, time
from xpt_ds.runtime.tether import tethered
with tethered([sys.executable, "-c", {LAUNCHER!r}, sys.argv[1], sys.argv[2]], ranks="rank", grace_s=3,
              stdout=subprocess.PIPE, text=True) as proc:
    assert proc.stdout.readline() == "up\\n"
    print(proc.pid, flush=True)
    time.sleep(600)
"""


def test_a_stage_whose_parent_is_killed_gets_sigterm_to_its_ranks_then_its_grace(tmp_path):
    """--ranks: the parent's kill -9 reaches the ranks as SIGTERM (not their forked worker, not the launcher), and
    what is left of the command, the stubborn rank in a session of its own included, goes grace_s later."""
    (tmp_path / "rank.py").write_text(RANK)
    saved, stubborn = tmp_path / "saved", tmp_path / "stubborn"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    parent = subprocess.Popen([sys.executable, "-c", STAGE_PARENT, str(saved), str(stubborn)], stdout=subprocess.PIPE,
                              text=True, env=env)
    below = []
    try:
        tether = int(parent.stdout.readline())
        below = psutil.Process(tether).children(recursive=True)
        assert len(below) == 5  # the launcher, two ranks, the worker, and nothing else
        os.kill(parent.pid, signal.SIGKILL)
        started = time.time()
        parent.wait(timeout=30)
        deadline = time.time() + 30
        while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in below) and time.time() < deadline:
            time.sleep(0.05)
        gone = time.time() - started
        assert not [p.cmdline() for p in below if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert saved.read_text() == "SIGTERM"  # it checkpointed
        assert not (tmp_path / "saved.worker").exists() and not stubborn.exists()
        assert 2.5 < gone < 15, gone  # the stubborn rank had its grace (3 s), not more
    finally:
        parent.kill()
        for p in below:
            with contextlib.suppress(psutil.Error):
                p.kill()


def test_a_stage_tether_passes_each_signal_on_and_kills_at_once_without_ranks(tmp_path):
    """SIGINT to the tether reaches the rank as SIGINT (a Ctrl-C passed on), and the worker it leaves behind goes
    when it ends; a command without a process that runs the ranks' module is killed at once, with its children."""
    (tmp_path / "rank.py").write_text(RANK)
    saved = tmp_path / "saved"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    with tethered([sys.executable, "-m", "rank", str(saved)], ranks="rank", grace_s=30, stdout=subprocess.PIPE,
                  text=True, env=env) as proc:
        assert proc.stdout.readline() == "up\n"
        (rank,) = psutil.Process(proc.pid).children()
        (worker,) = rank.children()
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=10) == 0  # the rank's own exit, well within its grace
    assert saved.read_text() == "SIGINT"
    assert not _runs_after(worker, 5) and not (tmp_path / "saved.worker").exists()  # killed, not signalled
    with tethered([sys.executable, "-c", WAITS], ranks="rank", grace_s=30, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline() == "up\n"
        started = time.time()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGKILL and time.time() - started < 5
        assert not _wait_gone(proc.pid, 10)


def test_a_parent_that_goes_during_a_stop_ends_the_grace(tmp_path):
    """A stop in progress (here a stubborn rank in its 30 s grace) and then the parent's end (a ``kill -9`` after a
    ``kill``, or the block left): whoever stopped it gave up waiting, and the rest is killed at once."""
    (tmp_path / "rank.py").write_text(RANK)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    with tethered([sys.executable, "-m", "rank", "stubborn", str(tmp_path / "x")], ranks="rank", grace_s=30,
                  stdout=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout.readline() == "up\n"
        below = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # the rank is in its grace
        started = time.time()
    assert time.time() - started < 3  # not the 5 s after which the block would kill the group itself
    assert not [p for p in below if _runs_after(p, 1)]
