"""How ``xpt-ds train`` starts and ends around signals and failures: a plain run inside a Slurm job is a world of
one, ``srun`` tasks take their ranks from Slurm; a Ctrl-C while the run shuts down neither interrupts the shutdown
nor prints a traceback, and the process ends with no DataLoader worker left; a stop signal while the run starts
ends it as preempted (124) without training; an unexpected exception leaves status.json 'failed', not 'running'."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import base_config, one_error_line_of, run_main, write_config
from xpt_ds.cli.train import _single_process_env
from xpt_ds.runtime.preemption import PreemptionWatcher, interrupts_deferred, record_stops

DIST = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_LOCALID")


def _env(monkeypatch, **values) -> dict:
    for name in DIST:
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    _single_process_env()
    return {name: os.environ.get(name) for name in DIST}


def test_a_plain_run_inside_a_slurm_job_is_a_world_of_one(monkeypatch):
    """SLURM_PROCID without WORLD_SIZE (a batch script's plain ``xpt-ds train``): DeepSpeed looked for MPI
    (``No module named 'mpi4py'``) before."""
    env = _env(monkeypatch, SLURM_PROCID="0", SLURM_LOCALID="0")
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("0", "0", "1", "127.0.0.1")
    assert env["MASTER_PORT"].isdigit()


def test_srun_tasks_take_rank_and_local_rank_from_slurm_unless_set(monkeypatch):
    """docs/cluster.md's ``srun python -m xpt_ds.cli.train`` with WORLD_SIZE, MASTER_ADDR and MASTER_PORT exported:
    LOCAL_RANK was unset before (DeepSpeed then looked for MPI)."""
    launched = dict(WORLD_SIZE="4", MASTER_ADDR="node1", MASTER_PORT="23456")
    env = _env(monkeypatch, SLURM_PROCID="3", SLURM_LOCALID="1", **launched)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["MASTER_PORT"]) == ("3", "1", "4", "23456")
    env = _env(monkeypatch, SLURM_PROCID="3", SLURM_LOCALID="1", RANK="2", LOCAL_RANK="0", **launched)
    assert (env["RANK"], env["LOCAL_RANK"]) == ("2", "0")  # a launcher's own (torchrun inside srun) stand
    env = _env(monkeypatch, RANK="1", LOCAL_RANK="1", **launched)  # torchrun, no Slurm: as it was
    assert (env["RANK"], env["LOCAL_RANK"], env["MASTER_ADDR"]) == ("1", "1", "node1")


WORKER_LEFT = """
import atexit, multiprocessing, os, signal, sys, time
from xpt_ds.runtime.process_exit import exit_process

def worker():  # a DataLoader worker (xpt_ds.data.workers.start_worker) whose shutdown was cut short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)

if __name__ == "__main__":
    child = multiprocessing.get_context("fork").Process(target=worker, daemon=True)
    child.start()
    print(child.pid, flush=True)
    time.sleep(0.5)
    atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.2)))  # a Ctrl-C as the run exits
    exit_process(130)
"""


def test_the_process_ends_with_no_worker_left_and_a_ctrl_c_at_exit_prints_nothing(tmp_path):
    """multiprocessing's atexit handler SIGTERMed such a worker and joined it for ever (the run hung, holding
    .run.lock); a Ctrl-C while the atexit handlers ran printed 'Exception ignored in atexit callback' tracebacks."""
    import psutil
    script = tmp_path / "worker_left.py"
    script.write_text(WORKER_LEFT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=30)
    finally:  # hung (as it did): its worker too
        for process in psutil.Process(proc.pid).children() if proc.poll() is None else []:
            process.kill()
        proc.kill()
    worker = int(out.split()[0])
    assert proc.returncode == 130 and err == "", err
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE


def test_a_ctrl_c_while_the_run_shuts_down_is_counted_not_raised():
    """``xpt_ds.cli.train`` closes the trainer (its DataLoader workers) and the process group within
    ``interrupts_deferred``: a KeyboardInterrupt there left the workers running (and the process hung at exit)."""
    before = signal.getsignal(signal.SIGINT)
    with interrupts_deferred() as counted:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs at the next bytecode
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
    assert counted == [signal.SIGINT] * 2
    assert signal.getsignal(signal.SIGINT) is before


def test_a_stop_signal_before_the_trainer_watches_is_recorded_and_handed_over():
    """From the top of main a SIGTERM or SIGUSR1 is recorded (it killed the rank, 143, before the trainer's watcher
    was installed); the watcher takes the first one over. Ctrl-C stays a KeyboardInterrupt until then."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        record_stops()
        os.kill(os.getpid(), signal.SIGTERM)  # the default action would end this process
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        watcher = PreemptionWatcher(rank=1)
        assert watcher.received == signal.SIGTERM and watcher.requested and not watcher.interrupted
        assert watcher.level == 1.0
        assert not PreemptionWatcher(rank=1).requested  # taken over once: a later run in this process starts clean
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_a_command_that_ends_before_training_gives_the_stop_signals_back(tmp_path):
    """An in-process ``main`` that ends on a config error leaves SIGTERM and SIGUSR1 as it found them: recorded
    and ignored, they would no longer stop its caller (the ``xpt-ds`` dispatcher, a test)."""
    from xpt_ds.cli.train import main
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        assert main(["--config", str(tmp_path / "missing.yaml")]) == 2
        assert signal.getsignal(signal.SIGTERM) is previous[signal.SIGTERM]
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _status(run) -> dict:
    return json.loads((run / "status.json").read_text())


def test_a_stop_while_the_run_starts_ends_it_as_preempted_without_training(tmp_path, tiny_roberta, corpus):
    """A SIGTERM as the run joins its process group (a Slurm job cancelled, or requeued, while its ranks start):
    status 124, so launch/slurm.sbatch requeues the job, one line, no step taken and nothing saved."""
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", base_config(run, tiny_roberta, corpus))
    proc = run_main("train_fault_probe", ["--config", str(cfg)], env={"STOP_AT_START": "1"}, timeout=300)
    assert proc.returncode == 124 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-3000:])
    assert proc.stderr.strip().splitlines()[-1] == (
        "preempted: stopped before training started, nothing to save; exiting with 124 so the job is requeued (by "
        "hand: the same command starts the run)")
    status = _status(run)
    assert status["state"] == "preempted" and status["global_step"] == 0, status
    assert not list((run / "checkpoints").glob("global_step*")) and "step 1/" not in proc.stderr


def test_an_unexpected_error_leaves_status_failed_with_its_traceback(tmp_path, tiny_roberta, corpus):
    """A RuntimeError that is no lost peer (a host allocation that failed) in step 2: status.json said 'running'
    after it (``xpt-ds status``: 'died'); now 'failed' with the error's first line, and the traceback still shows."""
    run = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", base_config(run, tiny_roberta, corpus))
    proc = run_main("train_fault_probe", ["--config", str(cfg)], env={"RAISE_AT": "2"}, timeout=300)
    assert proc.returncode == 1 and "Traceback" in proc.stderr, (proc.returncode, proc.stderr[-3000:])
    status = _status(run)
    assert status["state"] == "failed" and status["global_step"] == 1, status
    assert status["error"] == ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: "
                               "can't allocate memory: you tried to allocate 1024 bytes."), status


def test_a_run_out_of_open_files_ends_in_one_line_and_a_low_soft_limit_is_raised(tmp_path, tiny_roberta, corpus):
    """Under ``ulimit -n 64`` a run with DataLoader workers failed in its first step with torch's "Too many open
    files" and a 49-line traceback, status.json 'failed' with that text (2026-12-05). Now: out of files (here: the
    limit lowered to the files open as step 1 starts), one line naming the limit and what to change; under a low
    soft limit alone, the run raises it at its start and trains."""
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus)
    cfg["data"]["num_workers"] = 2
    cfg["phases"] = [{**cfg["phases"][0], "steps": 2}]
    args = ["--config", str(write_config(tmp_path / "c.yaml", cfg))]
    proc = run_main("train_fault_probe", args, env={"NOFILE_AT_STEP": "1:+0:+0"}, timeout=300)
    line = one_error_line_of(proc, "this process ran out of open files: the limit (`ulimit -n`) is ",
                             "or set data.num_workers below 2")
    limit = int(line.split(" is ", 1)[1].split(",", 1)[0])
    assert f"its hard limit {limit}; start the job with a higher one" in line
    status = _status(tmp_path / "run")
    assert (status["state"], status["error"], status["global_step"]) == ("failed", line[len("error: "):], 0)
    proc = run_main("train_fault_probe", args, env={"NOFILE": "+60:4096"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "open-file limit (ulimit -n) raised from " in proc.stderr and " to 4096, as its hard limit allows" \
        in proc.stderr, proc.stderr[-3000:]


def test_running_out_of_files_is_told_from_other_failures():
    import errno

    from xpt_ds.runtime.open_files import ran_out
    torch_said = RuntimeError("Too many open files. Communication with the workers is no longer possible. Please "
                              "increase the limit using `ulimit -n` in the shell ...")
    assert ran_out(torch_said) and ran_out(OSError(errno.EMFILE, "Too many open files", "shard.tar"))
    try:
        try:
            raise OSError(errno.EMFILE, "no text of its own")
        except OSError as inner:
            raise RuntimeError("Caught OSError in DataLoader worker process 0") from inner
    except RuntimeError as outer:
        assert ran_out(outer)
    assert not ran_out(OSError(errno.ENOSPC, "No space left on device"))
    assert not ran_out(RuntimeError("DefaultCPUAllocator: can't allocate memory"))


def test_the_hook_drops_running_out_and_a_handover_lost_with_it_and_prints_the_rest(capsys, monkeypatch):
    """multiprocessing's resource_sharer thread printed EMFILE, or a broken pipe to a worker that had ended for want
    of descriptors, through sys.excepthook before the rank's one line (1 run in 3 of the test above, 2026-12-05)."""
    import errno

    from xpt_ds.runtime.open_files import quiet_when_out
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    quiet_when_out()
    quiet_when_out()  # once only

    def raised(code: str, filename: str):
        try:
            exec(compile(code, filename, "exec"))
        except BaseException as e:
            return type(e), e, e.__traceback__

    sharer = "/lib/python3/multiprocessing/resource_sharer.py"
    sys.excepthook(*raised(f"raise OSError({errno.EMFILE}, 'Too many open files')", "/lib/python3/queues.py"))
    sys.excepthook(*raised("raise BrokenPipeError(32, 'Broken pipe')", sharer))
    assert capsys.readouterr().err == ""
    sys.excepthook(*raised("raise BrokenPipeError(32, 'Broken pipe')", "/srv/elsewhere.py"))
    sys.excepthook(*raised("raise ValueError('a bug')", sharer))
    err = capsys.readouterr().err
    assert err.count("Traceback") == 2 and "BrokenPipeError" in err and "ValueError: a bug" in err
