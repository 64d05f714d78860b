"""Stopping a sweep: Ctrl-C, ``kill`` and a Ctrl-C inside an in-process stage stop its running stages (through
their tethers, ``xpt_ds.sweeps.stages``), with a checkpoint, and start no other."""
import contextlib
import json

import pytest


def _stop_the_sweep_while_it_trains(tmp_path, sweep_config, methods: list[str], extra: list[str], stop) -> tuple:
    """Start a sweep whose runs train for ever, ``stop(sweep)`` once every run of ``methods`` trains, wait for the
    sweep's end; (the sweep, its log's text, each run's status.json, the processes that ran below it)."""
    import os
    import signal
    import time

    import psutil

    from conftest import start_main
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    argv = ["--config", str(config), "--methods", *methods, "xpt_sp", "--sizes", "0.8K", "--out", str(out), *extra,
            "--test-shards", *test_shards, "--set", "phases.0.steps=100000", "checkpoint.every_steps=100000"]
    log = tmp_path / "sweep.log"
    sweep = start_main("xpt_ds.cli.sweep", argv, log)  # forked: its trainers are real interpreters, as it starts them
    status = [out / "runs" / m / "800" / "status.json" for m in methods]
    below = []
    try:
        deadline = time.time() + 240
        while not all(p.is_file() and json.loads(p.read_text())["state"] == "running" for p in status):
            assert sweep.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        below = psutil.Process(sweep.pid).children(recursive=True)
        for p in below:
            p.cmd = p.cmdline()  # kept: it cannot be read once the process has gone
        stop(sweep)
        sweep.wait(timeout=400)
        deadline = time.time() + 30  # the tethers end a moment after the sweep
        while [p for p in below if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] and time.time() < deadline:
            time.sleep(0.1)
        return sweep, log.read_text(), [json.loads(p.read_text()) for p in status], below
    finally:
        if sweep.poll() is None:  # nothing trains on after a failed test
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait(timeout=30)
        for p in below:
            with contextlib.suppress(psutil.Error):
                p.kill()


def _trainers(below) -> list:
    """The training processes (``python -m xpt_ds.cli.train``), not their launchers or tethers."""
    return [p for p in below if "-m" in p.cmd and p.cmd[p.cmd.index("-m") + 1] == "xpt_ds.cli.train"]


def test_a_ctrl_c_to_a_sweep_stops_its_parallel_runs_with_a_checkpoint(tmp_path, sweep_config):
    """Ctrl-C (SIGINT to the sweep's process group, as a terminal sends it) while two runs train side by side
    (--parallel 2): the sweep passes it on, both trainers checkpoint and stop as interrupted, none goes on training on
    its own, no further run starts, and the sweep ends with one 'interrupted' line."""
    import os
    import signal
    sweep, err, states, below = _stop_the_sweep_while_it_trains(
        tmp_path, sweep_config, ["xpt", "scratch"], ["--parallel", "2"], lambda s: os.killpg(s.pid, signal.SIGINT))
    assert len(_trainers(below)) == 2
    assert sweep.returncode == 130 and err.strip().splitlines()[-1].startswith("interrupted: sweep stopped"), err
    assert not [p.cmd for p in below if p.is_running() and p.status() != "zombie"]
    assert [s["state"] for s in states] == ["interrupted"] * 2 and all(s["last_complete_checkpoint"] for s in states)
    out = tmp_path / "sweep"
    assert not (out / "runs" / "xpt_sp").exists() and not (out / "results.jsonl").exists()


def test_a_sweep_killed_by_sigterm_stops_the_ranks_of_its_multi_rank_run(tmp_path, sweep_config):
    """``kill PID`` (SIGTERM to the sweep alone, as ``timeout`` or a scheduler sends it) while a 2-rank run trains
    under the deepspeed launcher, which dies of a SIGTERM and leaves its ranks training: the sweep's stop reaches
    the ranks themselves; they checkpoint and end as preempted, and nothing of the run is left."""
    import os
    import signal
    sweep, err, states, below = _stop_the_sweep_while_it_trains(
        tmp_path, sweep_config, ["xpt"], ["--nproc", "2"], lambda s: os.kill(s.pid, signal.SIGTERM))
    assert len(_trainers(below)) == 2
    assert sweep.returncode == 130 and err.strip().splitlines()[-1].startswith("interrupted: sweep stopped"), err
    assert not [p.cmd for p in below if p.is_running() and p.status() != "zombie"]
    assert states[0]["state"] == "preempted" and states[0]["last_complete_checkpoint"], states


def test_a_ctrl_c_inside_an_in_process_stage_stops_the_sweep(tmp_path, monkeypatch):
    """evaluate and export run inside the sweep's process; their ``cli_errors`` turns a Ctrl-C into status 130,
    which must stop the sweep (``Interrupted``, no stage starts), not count as that run's failure."""
    import sys

    from xpt_ds.sweeps import stages
    (tmp_path / "ctrl_c_tool.py").write_text(
        "from xpt_ds.errors import cli_errors\n\n\n@cli_errors\ndef main(argv):\n    raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(stages.Interrupted):
            stages._call("ctrl_c_tool", [], tmp_path / "tool.log", "evaluate")
        assert stages.stopping.is_set()
        assert (tmp_path / "tool.log").read_text().splitlines()[-1] == "interrupted"
    finally:
        stages.stopping.clear()
        sys.modules.pop("ctrl_c_tool", None)
