"""xpt_ds.runtime.tether with ``--ranks`` (launch/single_node.sh's launch_guard, a sweep's stages): a stop that comes
once the ranks have checkpointed and exited, while their launcher has yet to notice (DeepSpeed's launch.py polls
once a second), lets the command end with the ranks' status; it killed everything at once (exit 137)."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from xpt_ds.runtime.tether import tethered

# ``-m rank OUT [SECONDS]``: a rank that, on SIGTERM or SIGINT, "checkpoints" (writes the signal's name to OUT) and
# exits 124 or 130 as xpt_ds.cli.train does; given SECONDS it trains that long and exits 0 unasked.
RANK = """import os, signal, sys, time
def stop(s, f):
    open(sys.argv[1], "w").write(signal.Signals(s).name)
    os._exit(124 if s == signal.SIGTERM else 130)
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, stop)
print(os.getpid(), flush=True)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 600)
"""

# A launcher that notices its rank's end only LINGER seconds later (launch.py's poll, widened so the test's second
# signal lands in it) and then exits with the rank's status; a stop signal to it would end it (it ignores none).
LAUNCHER = """import subprocess, sys, time
rank = subprocess.Popen([sys.executable, "-m", "rank", *sys.argv[1:]], stdout=subprocess.PIPE, text=True)
print(rank.stdout.readline().strip(), flush=True)
code = rank.wait()
time.sleep(3)
sys.exit(code)
"""


def _gone(pid: int, seconds: float = 30) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def _tethered(tmp_path, *args):
    (tmp_path / "rank.py").write_text(RANK)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    return tethered([sys.executable, "-c", LAUNCHER, str(tmp_path / "saved"), *args], ranks="rank", grace_s=30,
                    stdout=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 124), (signal.SIGINT, 130)])
def test_a_second_stop_after_the_ranks_have_exited_keeps_their_status(tmp_path, sig, code):
    with _tethered(tmp_path) as proc:
        rank = int(proc.stdout.readline())
        os.kill(proc.pid, sig)  # the first stop: passed to the rank, which checkpoints and exits
        assert _gone(rank)
        os.kill(proc.pid, sig)  # the second, while the launcher has yet to notice: nothing left to pass it to
        started = time.time()
        assert proc.wait(timeout=30) == code  # was 137: the tether killed the launcher and itself
        assert time.time() - started < 15  # the launcher's own end, not the 30 s grace
    assert (tmp_path / "saved").read_text() == signal.Signals(sig).name


def test_a_first_stop_after_the_ranks_have_ended_keeps_their_status(tmp_path):
    """The run ended (rank status 0) and its launcher is still polling when the first SIGTERM comes (a job's time
    limit): the tether has seen the rank run (it looks every second), so it waits for the launcher's 0."""
    with _tethered(tmp_path, "2.5") as proc:
        rank = int(proc.stdout.readline())
        assert _gone(rank)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert not (tmp_path / "saved").exists()
