"""The test harness's own guard against a multi-rank job that hangs (``processes.launch``): at its timeout the
ranks' Python stacks are printed and shown in the failure, and the job is killed whole, its /dev/shm buffers too.
A hung collective then says where each rank waited instead of only that it timed out. And its guard against a job a
test began without waiting on it (``processes.start``, ``start_main``) and left running: killed whole after the
test (``kill_started``, conftest's ``no_started_job_left``)."""
import subprocess
import sys
import time

import psutil
import pytest
from conftest import base_config, kill_started, launch, read_metrics, start_main, write_config

pytestmark = pytest.mark.multiproc


def test_a_job_still_running_at_its_timeout_fails_with_its_ranks_stacks(tmp_path, tiny_roberta, corpus):
    """``launch``'s timeout (600 s by default) on a multi-rank job: SIGABRT to every rank, whose faulthandler
    prints where each thread was, and an AssertionError that shows it; nothing of the job is left running."""
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus)
    cfg["phases"][0]["steps"] = 10_000
    path = write_config(tmp_path / "cfg.yaml", cfg)
    with pytest.raises(AssertionError) as info:
        launch(["--config", str(path)], nproc=2, timeout=20)
    text = str(info.value)
    assert "was still running after 20 s: every rank was sent SIGABRT" in text
    # the ranks share the job's stderr and faulthandler writes its header in pieces, so two ranks' headers can
    # interleave ("Fatal Python error: Fatal Python error: Aborted"): count the first piece, at least one write
    # each. A loaded CI run once showed 3 (the cause was not found; a rank aborting on its own when its peer
    # died, before the harness's SIGABRT reached it, would do it)
    assert text.count("Fatal Python error") >= 2 and "(most recent call first):" in text, text[-3000:]
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(path) in " ".join(p.info["cmdline"] or [])]


def test_ranks_started_after_the_timeout_are_killed_with_the_job(tmp_path):
    """torchrun starts its ranks in sessions of their own; at a timeout that came before it had started them, no
    rank was there to abort, and the ones it started while the harness waited for it to end outlived the job (a
    rank of the test above was still alive 55 minutes after a -n 4 suite run; the same job given a 1 s timeout left 2
    ranks and 8 DataLoader workers training). Here a stand-in launcher starts its "rank" 1 s into that wait; the
    harness stops and kills it with the launcher, and its stderr is read."""
    from processes import _stacks_then_kill

    marker = str(tmp_path / "late-rank")
    rank = f"import time; time.sleep(600)  # {marker}"
    launcher = (f"import subprocess, sys, time; time.sleep(1); subprocess.Popen([sys.executable, '-c', {rank!r}], "
                "start_new_session=True); print('rank started', file=sys.stderr, flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", launcher, "--master_port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    start = time.monotonic()
    err = _stacks_then_kill(proc)
    took = time.monotonic() - start
    left = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    for process in left:  # a failing harness must not leave it sleeping for 10 minutes
        process.kill()
    assert took < 45  # the 30 s wait for the launcher, then the kill; not the pipes' 60 s more
    assert "rank started" in err
    assert not left


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_started_training_job_left_running_is_killed_with_its_workers(tmp_path, tiny_roberta, corpus):
    """A test that fails between ``start_main`` and its wait: the trainer and its DataLoader workers are killed
    after it, and named."""
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus)
    cfg["phases"][0]["steps"] = 10_000
    cfg["data"].update(valid_shards=[], num_workers=2)
    job = start_main("xpt_ds.cli.train", ["--config", str(write_config(tmp_path / "c.yaml", cfg))], tmp_path / "log")
    deadline = time.time() + 300
    while not (tmp_path / "run" / "metrics.jsonl").exists() or max(read_metrics(tmp_path / "run"), default=0) < 2:
        assert job.poll() is None and time.time() < deadline, (tmp_path / "log").read_text()[-3000:]
        time.sleep(0.05)
    below = psutil.Process(job.pid).children(recursive=True)
    assert len(below) >= 2  # its DataLoader workers
    assert kill_started() == [f"forked pid {job.pid}"]
    assert job.returncode == -9  # killed, and reaped
    assert not _alive(below)
    assert kill_started() == []  # and forgotten


def test_a_started_launcher_left_running_is_killed_with_a_rank_in_a_session_of_its_own(tmp_path):
    """As torchrun starts its ranks (``start_new_session``): out of the launcher's process group, found below it."""
    import processes
    marker = str(tmp_path / "rank")
    rank = f"import time; time.sleep(600)  # {marker}"
    launcher = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {rank!r}], "
                "start_new_session=True); print('rank started', flush=True); time.sleep(600)")
    with open(tmp_path / "log", "w") as out:
        processes.STARTED.append(subprocess.Popen([sys.executable, "-c", launcher], stdout=out))
    deadline = time.time() + 60
    while "rank started" not in (tmp_path / "log").read_text():
        assert time.time() < deadline
        time.sleep(0.05)
    below = psutil.Process(processes.STARTED[-1].pid).children(recursive=True)
    try:
        assert len(below) == 1 and marker in " ".join(below[0].cmdline())
        assert kill_started() == [f"{sys.executable} -c {launcher}"]
        assert not _alive(below)
    finally:  # a failing guard must not leave the rank sleeping for 10 minutes
        for process in _alive(below):
            process.kill()
