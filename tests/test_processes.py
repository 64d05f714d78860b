"""The tests' own way of starting runs (tests/processes.py) leaves the test worker as it found it."""
import io
import os
import signal
import threading
import time

from conftest import start_main


def test_a_forked_run_killed_mid_bar_leaves_the_worker_able_to_draw_bars(tmp_path):
    """tqdm's write lock holds a semaphore that a forked child shares: a run killed while it drew a bar left the
    worker unable to draw one, and the next from_pretrained in that worker hung until CI's limit (2026-12-05)."""
    from tqdm.auto import tqdm
    list(tqdm(range(2), file=io.StringIO()))  # the worker's lock exists before the fork, as after any load
    log = tmp_path / "probe.log"
    job = start_main("bar_holder_probe", [], log)
    deadline = time.time() + 60
    while "holding" not in log.read_text() and job.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert "holding" in log.read_text(), log.read_text()
    os.killpg(job.pid, signal.SIGKILL)
    assert job.wait(30) == -signal.SIGKILL
    drawn = threading.Thread(target=lambda: list(tqdm(range(2), file=io.StringIO())), daemon=True)
    drawn.start()
    drawn.join(10)
    assert not drawn.is_alive(), "the worker cannot draw a progress bar: the killed run kept tqdm's lock"
