"""A command's process ends through ``xpt_ds.runtime.process_exit``: what shutdown does that a program can see
(threads finish, atexit handlers run, buffered output is written, the status is sys.exit's), without the
interpreter's teardown."""
import subprocess
import sys

import pytest

from xpt_ds.runtime.process_exit import exit_status

SCRIPT = """
import atexit, os, sys, threading, time
from xpt_ds.runtime.process_exit import exit_process

class Module:
    def __del__(self, write=os.write):  # a module global's finalizer: only the interpreter's teardown runs it
        write(1, b"torn down\\n")

kept = Module()
atexit.register(print, "atexit ran", flush=True)

def late():
    time.sleep(0.3)
    sys.stdout.write("thread finished\\n")  # buffered: the exit must flush it

threading.Thread(target=late).start()
sys.stdout.write("no newline, buffered")
sys.stderr.write("said on stderr")
exit_process(CODE)
"""


@pytest.mark.parametrize("code,status", [(3, 3), (0, 0), (None, 0), (256 + 2, 2)])
def test_a_process_ends_as_shutdown_would_leave_it_without_the_teardown(code, status):
    proc = subprocess.run([sys.executable, "-c", SCRIPT.replace("CODE", repr(code))], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == status, proc.stderr
    assert proc.stdout.splitlines() == ["no newline, bufferedthread finished", "atexit ran"]
    assert proc.stderr == "said on stderr"
    assert "torn down" not in proc.stdout


def test_the_status_is_sys_exits(capsys):
    assert [exit_status(c) for c in (None, 0, 2, 124, 130, 256)] == [0, 0, 2, 124, 130, 0]
    assert exit_status("error: bad") == 1
    assert capsys.readouterr().err == "error: bad\n"
