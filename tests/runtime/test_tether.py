"""xpt_ds.runtime.tether: a command in a session of its own that still ends with the process that started it."""
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
