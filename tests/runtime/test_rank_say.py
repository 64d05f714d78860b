"""What the ranks of a job say as they end: once per machine when they say the same, each rank's own line when
it differs (xpt_ds.runtime.rank_say), checked with sibling processes and through the real deepspeed launcher."""
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, base_config, launch, write_config


def _say(line: str, local_rank: int, rank: int, world: int = 2, wait: bool = True,
         wait_s: float | None = None) -> subprocess.Popen:
    """A rank, a child of this test process as the ranks of one launch are children of one launcher process;
    ``wait_s``: how long it waits for local rank 0's line (default rank_say.WAIT_S)."""
    env = {**os.environ, "WORLD_SIZE": str(world), "LOCAL_RANK": str(local_rank), "RANK": str(rank)}
    extra = "" if wait_s is None else f", wait_s={wait_s}"
    code = f"from xpt_ds.runtime.rank_say import say_once; say_once({line!r}{extra})"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    if wait:
        proc.wait(60)
    return proc


def _forget():
    env = {**os.environ, "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    subprocess.run([sys.executable, "-c", "from xpt_ds.runtime import rank_say; rank_say.forget()"], cwd=REPO,
                   env=env, check=True)


def test_a_line_local_rank_0_said_is_not_repeated_and_another_is_said():
    _forget()
    assert _say("error: bad key", 0, 0).stderr.read() == "error: bad key\n"
    assert _say("error: bad key", 1, 1).stderr.read() == ""  # said once for this machine
    assert _say("error: shard 3 is corrupt", 1, 1).stderr.read() == "error: shard 3 is corrupt\n"
    assert _say("error: bad key", 1, 3, world=4).stderr.read() == ""

    _forget()  # a new launch: the earlier line is not this one's, so a rank alone says its own after a wait
    started = time.monotonic()
    assert _say("error: bad key", 1, 1).stderr.read() == "error: bad key\n"
    assert time.monotonic() - started >= 0.5


def test_a_rank_waits_for_local_rank_0_and_a_world_of_one_says_everything():
    _forget()
    # a long wait, so a loaded machine cannot start local rank 0 too late: rank 1 ends silent only if it read
    # local rank 0's line (at the end of its wait it would say its own)
    later = _say("preempted: checkpoint global_step000000004 is complete", 1, 1, wait=False, wait_s=60)
    time.sleep(0.1)
    _say("preempted: checkpoint global_step000000004 is complete", 0, 0)
    assert later.wait(120) == 0 and later.stderr.read() == ""
    assert _say("error: x", 0, 0, world=1).stderr.read() == "error: x\n"
    assert _say("error: x", 1, 1, world=1).stderr.read() == "error: x\n"


@pytest.mark.multiproc
def test_a_bad_config_key_is_said_once_by_a_two_rank_job(tmp_path, tiny_roberta, corpus):
    """Every rank reads the same config and stops on the same key: one error line, not one per rank."""
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus)
    cfg["optim"]["micro_batch_sise"] = 4
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))], nproc=2, launcher="deepspeed")
    assert proc.returncode == 2, proc.stderr[-3000:]
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "error:" in line]
    assert len(said) == 1 and said[0].startswith("error: ") and "micro_batch_sise" in said[0], said
