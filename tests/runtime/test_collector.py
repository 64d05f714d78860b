"""xpt_ds.runtime.collector: a rank's imports run without collector passes and end frozen; its build runs
without passes and stays collectable, so the engine a phase switch drops is freed (checked through the real
``xpt_ds.cli.train`` entry point). The freezes run in forked children, never in this test process."""
import gc
import os
import subprocess
import sys
import weakref

import pytest

from conftest import REPO, base_config, free_port, run_main, write_config
from xpt_ds.runtime import collector


def test_the_tests_run_with_the_collector_on_and_the_collected_modules_frozen():
    """tests/conftest.py turns the collector off while a worker collects, and on again once it has frozen what the
    collection imported: a test runs as a user's program does, with its garbage collected."""
    assert gc.isenabled() and gc.get_freeze_count() > 10_000


def in_child(check) -> None:
    """``check()`` in a forked child; its failure comes back as this test's."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        message = b""
        try:
            check()
        except BaseException as e:  # whatever failed, it is this test's failure
            message = f"{type(e).__name__}: {e}".encode()
        os.write(write, message[:60000])
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and not message, message


def _passes():
    """gc.callbacks hook: the list of collector passes started since it was added, and a remover."""
    started = []

    def hook(phase, info):
        if phase == "start":
            started.append(info["generation"])
    gc.callbacks.append(hook)
    return started, lambda: gc.callbacks.remove(hook)


def test_imports_run_without_passes_and_what_they_made_is_frozen():
    def check():
        gc.enable()
        before = gc.get_freeze_count()
        started, remove = _passes()
        with collector.importing():
            assert not gc.isenabled()
            made = [[i] for i in range(200_000)]  # 200,000 tracked containers: many passes' worth
        remove()
        assert started == [] and gc.isenabled()
        assert gc.get_freeze_count() >= before + len(made)
    in_child(check)


def test_the_collector_comes_back_as_it_was_after_an_error():
    def check():
        for was_on in (True, False):
            (gc.enable if was_on else gc.disable)()
            with pytest.raises(ImportError):
                with collector.importing():
                    raise ImportError("no such module")
            assert gc.isenabled() == was_on
            with pytest.raises(ValueError):
                with collector.paused():
                    raise ValueError("bad config")
            assert gc.isenabled() == was_on
    in_child(check)


def test_what_is_built_while_paused_stays_collectable():
    def check():
        gc.enable()
        before = gc.get_freeze_count()

        class Node:
            """One end of a reference cycle."""
        with collector.paused():
            assert not gc.isenabled()
            a, b = Node(), Node()
            a.other, b.other = b, a  # a cycle: only the collector frees it
            gone = weakref.ref(a)
        assert gc.isenabled() and gc.get_freeze_count() == before
        del a, b
        gc.collect()
        assert gone() is None
    in_child(check)


def test_the_engine_a_phase_switch_drops_is_collected(tmp_path, tiny_roberta, corpus):
    """Through ``xpt_ds.cli.train.main``: a freeze that reached the build would keep the phase-1 engine (its
    parameters, optimizer and, on a GPU, device memory) alive in its own cycles for the rest of the run."""
    cfg = write_config(tmp_path / "c.yaml", base_config(tmp_path / "run", tiny_roberta, corpus))
    probe = tmp_path / "probe.txt"
    proc = run_main("phase_switch_probe", ["--config", str(cfg)], env={"PROBE_OUT": str(probe)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert probe.read_text() == "dropped engine collected: True; its optimizer state freed: True\n"


@pytest.mark.multiproc
def test_a_zero3_phase_switch_frees_the_dropped_optimizers_state(tmp_path, tiny_roberta, corpus):
    """ZeRO-3 on 2 ranks: DeepSpeed 0.19.8 keeps the dropped engine reachable (closures of its hooks' autograd
    Functions; ``_z3_optimizer`` on each parameter), so its parameters and optimizer state are let go
    explicitly (``engine.destroy_engine``): its masters and Adam moments are freed on both ranks."""
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus, deepspeed=str(REPO / "ds_configs/zero3_fp32.json"))
    probe = tmp_path / "probe.txt"
    env = {**os.environ, "PROBE_OUT": str(probe), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
           "TORCHDYNAMO_DISABLE": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(free_port()), str(REPO / "tests/phase_switch_probe.py"), "--config",
                           str(write_config(tmp_path / "c.yaml", cfg))], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        assert (tmp_path / f"probe.txt.rank{rank}").read_text().endswith("its optimizer state freed: True\n")
