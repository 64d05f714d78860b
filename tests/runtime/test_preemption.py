"""Preemption through the real deepspeed launcher: SIGUSR1 to one rank checkpoints every rank and exits 124;
the same command resumes and ends exactly where an uninterrupted run ends."""
import json
import os
import signal
import time

import pytest
import torch

from conftest import LONG_STEPS, launch, long_config, rank_pids, read_metrics, start, write_config
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import complete_tags, tag_for

pytestmark = pytest.mark.multiproc
END = 2 * LONG_STEPS


def _cfg(run_dir, tiny_roberta, corpus):
    cfg = long_config(run_dir, tiny_roberta, corpus, every=20)
    cfg["checkpoint"]["keep_last"] = 2
    return cfg


def test_sigusr1_checkpoints_exits_124_and_resumes_exactly(tmp_path, tiny_roberta, corpus, long_reference):
    straight = long_reference  # the same run left alone (a checkpoint every 10 steps, all kept)
    run = tmp_path / "preempted"
    cfg_path = write_config(tmp_path / "p.yaml", _cfg(run, tiny_roberta, corpus))
    launcher = start(["--config", str(cfg_path)], tmp_path / "preempted.log")
    deadline = time.time() + 300
    while not (run / "metrics.jsonl").exists() or max(read_metrics(run), default=0) < 6:
        assert launcher.poll() is None and time.time() < deadline, "run ended before it could be preempted"
        time.sleep(0.05)
    os.kill(rank_pids(launcher)[1], signal.SIGUSR1)  # one rank only: the ranks must agree by themselves
    launcher.wait(timeout=300)
    out = (tmp_path / "preempted.log").read_text()
    assert launcher.returncode == 124, (launcher.returncode, out[-1500:])
    assert "preempted: checkpoint global_step" in out
    status = json.loads((run / "status.json").read_text())
    stopped = status["global_step"]
    assert status["state"] == "preempted" and 6 <= stopped < END
    assert status["last_complete_checkpoint"] == complete_tags(run / "checkpoints")[-1] == f"global_step{stopped:09d}"

    proc = launch(["--config", str(cfg_path)], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want, got = read_metrics(straight), read_metrics(run)
    assert all(got[s]["train/loss"] == want[s]["train/loss"] for s in range(1, END + 1))
    assert complete_tags(run / "checkpoints") == [tag_for(END - 20), tag_for(END)]  # keep_last 2
    a, b = (load_checkpoint_fp32(r / "checkpoints", tag_for(END)) for r in (straight, run))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_ctrl_c_checkpoints_after_the_step_and_a_second_one_stops_at_once():
    """Ctrl-C (SIGINT, here to the process alone) is a preemption the user asked for: checkpoint, exit 130; a second
    Ctrl-C while that is pending raises KeyboardInterrupt. Both were a traceback before."""
    import threading

    from xpt_ds.runtime.preemption import PreemptionWatcher
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        watcher = PreemptionWatcher(rank=1)  # rank 1: no "interrupt:" line
        assert threading.current_thread() is threading.main_thread()
        os.kill(os.getpid(), signal.SIGINT)
        assert watcher.requested and watcher.interrupted
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs at the next bytecode; never reached
        watcher = PreemptionWatcher(rank=1)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # after a SIGTERM (a launcher passing the Ctrl-C on): the checkpoint
        assert watcher.requested and not watcher.interrupted
        with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C still stops at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_ctrl_c_on_a_run_checkpoints_exits_130_and_resumes(tmp_path, tiny_roberta, corpus):
    """Ctrl-C at a terminal signals the whole foreground process group (the run and its DataLoader workers): the
    run writes a checkpoint after the current step, says so in one line and exits 130 with status 'interrupted';
    the same command resumes from that checkpoint."""
    from conftest import start_main
    run = tmp_path / "run"
    cfg_path = write_config(tmp_path / "c.yaml", long_config(run, tiny_roberta, corpus, every=0))
    proc = start_main("xpt_ds.cli.train", ["--config", str(cfg_path)], tmp_path / "run.log")  # a group of its own
    deadline = time.time() + 300
    while not (run / "metrics.jsonl").exists() or max(read_metrics(run), default=0) < 3:
        assert proc.poll() is None and time.time() < deadline, "run ended before it could be interrupted"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=300)
    out = (tmp_path / "run.log").read_text()
    status = json.loads((run / "status.json").read_text())
    stopped = status["global_step"]
    assert proc.returncode == 130 and "Traceback" not in out, out[-3000:]
    assert status["state"] == "interrupted" and 3 <= stopped < END
    assert complete_tags(run / "checkpoints")[-1] == tag_for(stopped)  # (and phase 1's end, had it got there)
    assert out.strip().splitlines()[-1] == f"interrupted: checkpoint {tag_for(stopped)} is complete; the same " \
        "command resumes from it"
    assert "interrupt: stopping after this step with a checkpoint; press Ctrl-C again to stop now without one" in out
    done = launch(["--config", str(cfg_path)])
    assert done.returncode == 0 and f"resumed from {tag_for(stopped)}" in done.stderr, done.stderr[-3000:]
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_ctrl_c_that_reaches_one_rank_only_ends_every_rank_as_interrupted(tmp_path, tiny_roberta, corpus):
    """A Ctrl-C delivered to one rank (rank 1 here) stops the job after the step with a checkpoint, as any stop
    signal does, and every rank reports it as the interruption it was: one 'interrupted:' line, exit 130 on each,
    status 'interrupted' (rank 1 said 'interrupted', rank 0 'preempted' and 124 before)."""
    run = tmp_path / "run"
    cfg_path = write_config(tmp_path / "c.yaml", long_config(run, tiny_roberta, corpus, every=0))
    launcher = start(["--config", str(cfg_path)], tmp_path / "run.log")
    deadline = time.time() + 300
    while not (run / "metrics.jsonl").exists() or max(read_metrics(run), default=0) < 3:
        assert launcher.poll() is None and time.time() < deadline, "run ended before it could be interrupted"
        time.sleep(0.05)
    os.kill(rank_pids(launcher)[1], signal.SIGINT)
    launcher.wait(timeout=300)
    out = (tmp_path / "run.log").read_text()
    status = json.loads((run / "status.json").read_text())
    assert launcher.returncode == 130 and "Traceback" not in out, (launcher.returncode, out[-3000:])
    assert status["state"] == "interrupted" and "preempted" not in out
    assert out.count(f"interrupted: checkpoint {tag_for(status['global_step'])} is complete") == 1, out[-2000:]


def test_a_second_ctrl_c_mid_save_stops_at_once_and_the_newest_complete_checkpoint_stays(tmp_path, tiny_roberta,
                                                                                          corpus):
    """First Ctrl-C after step 3: 'stopping after this step with a checkpoint; press Ctrl-C again ...'. The second
    lands inside the save of step 3's checkpoint (tests/ctrl_c_probe.py): the run stops there, exit 130 with one
    line naming the newest complete checkpoint (step 2's), no traceback; status.json says 'interrupted' with that
    checkpoint; step 3's half-written tag does not count, so a resume ('auto') takes step 2's."""
    from conftest import base_config, run_main
    from xpt_ds.checkpoint.tags import MARKER, resolve_tag
    from xpt_ds.runtime.preemption import INTERRUPT_LINE
    from xpt_ds.runtime.status import read_status
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", base_config(run, tiny_roberta, corpus, checkpoint={"every_steps": 2}))
    proc = run_main("ctrl_c_probe", ["--config", str(cfg)], env={"CTRL_C_AT": "3"}, timeout=300)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count(INTERRUPT_LINE) == 1
    assert proc.stderr.strip().splitlines()[-1] == ("interrupted: stopped at once, without a checkpoint; the same "
                                                    f"command resumes from the newest complete checkpoint "
                                                    f"({tag_for(2)})"), proc.stderr[-2000:]
    ckpts = run / "checkpoints"
    assert complete_tags(ckpts) == [tag_for(2)] and resolve_tag(ckpts, "auto") == tag_for(2)
    assert (ckpts / tag_for(3)).is_dir() and not (ckpts / tag_for(3) / MARKER).exists()  # cut short: no marker
    status = read_status(run)
    assert status["state"] == "interrupted" and status["last_complete_checkpoint"] == tag_for(2), status
    assert status["global_step"] == 3 and status["error"] == "stopped at once by Ctrl-C, without a checkpoint"


def test_ranks_whose_launcher_is_killed_checkpoint_and_stop_and_the_run_resumes_exactly(tmp_path, tiny_roberta,
                                                                                         corpus, long_reference):
    """``kill -9`` of torchrun's agent (as the out-of-memory killer may): its ranks run in sessions of their own, so
    nothing reached them, and they trained on to the end with nobody to stop them (until 2026-12-04). Now each
    finds its launcher gone after its step: a checkpoint, status 'preempted', no rank left running; the same
    command resumes and ends on the uninterrupted run's losses and weights."""
    import psutil
    run = tmp_path / "run"
    cfg_path = write_config(tmp_path / "c.yaml", _cfg(run, tiny_roberta, corpus))
    launcher = start(["--config", str(cfg_path)], tmp_path / "run.log", launcher="torchrun")
    deadline = time.time() + 300
    while not (run / "metrics.jsonl").exists() or max(read_metrics(run), default=0) < 4:
        assert launcher.poll() is None and time.time() < deadline, "run ended before its launcher could be killed"
        time.sleep(0.05)
    ranks = [psutil.Process(pid) for pid in rank_pids(launcher).values()]
    assert len(ranks) == 2
    launcher.kill()
    launcher.wait()
    gone, alive = psutil.wait_procs(ranks, timeout=120)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive  # an orphan's zombie is init's
    out = (tmp_path / "run.log").read_text()
    assert "the launcher (pid " in out and "is gone: stopping after this step with a checkpoint" in out, out[-2000:]
    status = json.loads((run / "status.json").read_text())
    stopped = status["global_step"]
    assert status["state"] == "preempted" and 4 <= stopped < END, status
    assert status["last_complete_checkpoint"] == complete_tags(run / "checkpoints")[-1] == tag_for(stopped)

    proc = launch(["--config", str(cfg_path)], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want, got = read_metrics(long_reference), read_metrics(run)
    assert all(got[s]["train/loss"] == want[s]["train/loss"] for s in range(1, END + 1))
    a, b = (load_checkpoint_fp32(r / "checkpoints", tag_for(END)) for r in (long_reference, run))
    assert all(torch.equal(a[k], b[k]) for k in a)
