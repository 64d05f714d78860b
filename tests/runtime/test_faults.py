"""Faults as a cluster produces them: SIGTERM to a whole job (ranks and their DataLoader workers) under the
deepspeed launcher, torchrun and a single process; zero-filled shards; a shard corrupt on one node only; a rollback
followed by a requeue."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import (LONG_STEPS, REPO, _command, base_config, free_port, launch, logged_since, long_config,
                      read_metrics, start_main, write_config)
from data_tools.pipeline.shards import write_shard
from xpt_ds.checkpoint.branches import ABANDONED
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import complete_tags, tag_for
from xpt_ds.data.shards import DataError, scan_shard
from xpt_ds.runtime.preemption import PREEMPTED_EXIT_CODE

pytestmark = pytest.mark.multiproc

def _cfg(run_dir, tiny_roberta, corpus, every=10, steps=LONG_STEPS):
    cfg = long_config(run_dir, tiny_roberta, corpus, every, steps)
    assert "num_workers" not in cfg["data"]  # the default: 2 DataLoader workers per rank
    return cfg


def _start_session(args, log, nproc, launcher="deepspeed"):
    """The job in a session of its own, so that a signal to its process group reaches the launcher, every
    rank and every DataLoader worker, as `scancel` or a scheduler's time limit does. ``single``: one process,
    forked from this one (``start_main``: no interpreter's imports)."""
    if launcher == "single":
        return start_main("xpt_ds.cli.train", args, log)
    if launcher == "torchrun":
        port = str(free_port())
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", port,
               "-m", "xpt_ds.cli.train", *args]
        _, env = _command(args, 1, None)
    else:
        cmd, env = _command(args, nproc, None)
    with open(log, "w") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_step(proc, run, step, timeout=300):
    deadline = time.time() + timeout
    while not (run / "metrics.jsonl").exists() or max(read_metrics(run), default=0) < step:
        assert proc.poll() is None and time.time() < deadline, "run ended before it could be signalled"
        time.sleep(0.05)


def _wait_for_group(pgid, timeout=120):
    deadline = time.time() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        assert time.time() < deadline, "the job's processes did not exit"
        time.sleep(0.1)


@pytest.mark.parametrize("launcher,nproc", [("deepspeed", 2), ("torchrun", 2), ("single", 1)])
def test_sigterm_to_the_job_checkpoints_with_workers_on(tmp_path, tiny_roberta, corpus, long_reference, launcher,
                                                        nproc):
    run = tmp_path / "run"
    cfg_path = write_config(tmp_path / "p.yaml", _cfg(run, tiny_roberta, corpus))
    job = _start_session(["--config", str(cfg_path)], tmp_path / "job.log", nproc, launcher)
    _wait_for_step(job, run, 5)
    os.killpg(job.pid, signal.SIGTERM)
    job.wait(timeout=300)
    _wait_for_group(job.pid)  # DeepSpeed's runner dies of the signal at once; its ranks go on to save
    out = (tmp_path / "job.log").read_text()
    assert "DataLoader worker" not in out and "error:" not in out, out[-3000:]
    # the only traceback allowed is torchrun's agent reporting the signal it got
    assert out.count("Traceback") == out.count("SignalException: Process"), out[-3000:]
    # Every rank exits 124. A launcher that got the signal itself reports its own status: DeepSpeed's local
    # runner dies of it (-15) and its launch.py exits 1 after giving the ranks 30 s; torchrun's agent exits 1.
    if launcher == "single":
        assert job.returncode == PREEMPTED_EXIT_CODE, (job.returncode, out[-3000:])
    assert out.count("preempted: checkpoint global_step") == 1, out[-3000:]  # every rank's line, said once
    status = json.loads((run / "status.json").read_text())
    stopped = status["global_step"]
    assert status["state"] == "preempted" and 5 <= stopped < 2 * LONG_STEPS
    assert complete_tags(run / "checkpoints")[-1] == tag_for(stopped)
    if launcher != "deepspeed":
        # The exact resume from the checkpoint a SIGTERM left (DataLoader workers signalled too) once here, on
        # the deepspeed launcher: the ranks write it the same way under torchrun, whose resume after a signal
        # test_slurm checks (USR1 through torchrun; TERM to every process of the job step, workers included).
        return
    proc = launch(["--config", str(cfg_path)], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(stopped)}" in proc.stderr
    straight = long_reference  # the same run left alone
    want, got = read_metrics(straight), read_metrics(run)
    assert all(got[s]["train/loss"] == want[s]["train/loss"] for s in range(1, 2 * LONG_STEPS + 1))
    last = tag_for(2 * LONG_STEPS)
    a, b = load_checkpoint_fp32(straight / "checkpoints", last), load_checkpoint_fp32(run / "checkpoints", last)
    assert all(torch.equal(a[k], b[k]) for k in a)


def _zero_fill_second_half(shard):
    data = bytearray(shard.read_bytes())
    half = len(data) // 2
    data[half:] = bytes(len(data) - half)
    shard.write_bytes(bytes(data))


def test_zero_filled_shard_is_corrupt_by_its_tail_and_by_its_counts(tmp_path):
    docs = [[[i % 50 + 5] * 40] for i in range(30)]
    shard = tmp_path / "train-000000.tar"
    counts = write_shard(shard, "train", 0, docs, vocab_size=100)
    assert scan_shard(str(shard), (counts["documents"], counts["tokens"])).lengths.size == 30
    size = shard.stat().st_size
    _zero_fill_second_half(shard)
    assert shard.stat().st_size == size
    with pytest.raises(DataError, match=f"corrupt shard {shard}: .*bytes follow the end-of-archive marker"):
        scan_shard(str(shard))
    # a shard small enough that the zeros fit in the tar record's padding: only the counts tell
    small = tmp_path / "small.tar"
    write_shard(small, "train", 0, docs[:3], vocab_size=100)
    data = bytearray(small.read_bytes())
    second = data.find(b"train-000000-00000001")  # the second document's header
    data[second - 0:] = bytes(len(data) - second)
    small.write_bytes(bytes(data))
    assert scan_shard(str(small)).lengths.size == 1  # what a plain tar reader sees: one document, no error
    with pytest.raises(DataError, match=r"holds 1 documents / 40 tokens, the manifest records 3 / 120"):
        scan_shard(str(small), (3, 120))


def test_zero_filled_shard_in_a_run_fails_or_is_skipped_and_counted(tmp_path, tiny_roberta, corpus):
    data = tmp_path / "corpus"
    shutil.copytree(corpus, data)
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["splits"]["train"]["shard_documents"] and manifest["splits"]["train"]["shard_tokens"]
    shard = data / manifest["splits"]["train"]["shards"][0]
    _zero_fill_second_half(shard)
    cfg = base_config(tmp_path / "run", tiny_roberta, data)
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: corrupt shard {shard}: ")
    good = tmp_path / "good"
    shutil.copytree(corpus, good)
    cfg = base_config(tmp_path / "run2", tiny_roberta, data, data={
        **cfg["data"], "train_shards": [f"{data}/manifest.json:train", f"{good}/manifest.json:train"],
        "on_corrupt_shard": "skip"})
    proc = launch(["--config", str(write_config(tmp_path / "c2.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"skipped 1 corrupt shard(s) of 2: {shard}" in proc.stderr
    assert read_metrics(tmp_path / "run2")[1]["data/skipped_shards"] == 1


def test_one_rank_whose_streams_fail_stops_every_rank_at_once(tmp_path, tiny_roberta, corpus):
    """A shard corrupt in one node's copy fails that rank alone (tests/one_rank_stream_fault.py, rank 1): the
    other ranks stop with a line naming it and its error. Before, rank 0 went on into the next collective, which
    failed with gloo's "Connection closed by peer" and a traceback once rank 1 exited (exit code 1)."""
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus)
    cmd, env = _command([], 2, None, launcher="deepspeed")
    cmd = [*cmd[:cmd.index("--module")], str(REPO / "tests/one_rank_stream_fault.py"),
           "--config", str(write_config(tmp_path / "c.yaml", cfg))]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    own = "corrupt shard /node1/train-000000.tar: truncated in this node's copy"
    lines = [line for line in proc.stderr.splitlines() if "error: " in line]
    assert any(line.endswith(f"error: {own}") for line in lines), lines
    assert any(line.endswith(f"error: rank 1 could not build its data streams: {own}") for line in lines), lines
    assert len(lines) == 2, lines  # each rank's own line, once
    assert "Traceback" not in proc.stderr


def _mount_namespaces() -> bool:
    probe = ["unshare", "--mount", "--propagation", "private", "true"]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.mark.skipif(not _mount_namespaces(), reason="needs mount namespaces (unshare --mount: root in a container)")
def test_a_node_whose_copy_of_a_shard_differs_stops_every_rank_naming_it(tmp_path, tiny_roberta, corpus):
    """Rank 1 reads its own copy of the shards' folder (tests/other_copy_on_rank1.py: a bind mount in a mount
    namespace of its own), in which the training shard, named by path, is another shard: readable, with no
    manifest beside it to check it against. Every rank stops with one line naming the shard and both layouts,
    before the model is built. Before, the ranks trained on different data layouts, unnoticed."""
    shards, other = tmp_path / "shards", tmp_path / "other"
    shutil.copytree(corpus, shards)
    other.mkdir()
    name = json.loads((corpus / "manifest.json").read_text())["splits"]["train"]["shards"][0]
    valid = json.loads((corpus / "manifest.json").read_text())["splits"]["valid"]["shards"][0]
    shutil.copyfile(corpus / valid, other / name)  # another shard under the training shard's name
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus)
    cfg["data"]["train_shards"] = [str(shards / name)]
    cmd, env = _command([], 2, {"SHARDS": str(shards), "OTHER_COPY": str(other)}, launcher="deepspeed")
    cmd = [*cmd[:cmd.index("--module")], str(REPO / "tests/other_copy_on_rank1.py"),
           "--config", str(write_config(tmp_path / "c.yaml", cfg))]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "error: " in line]
    want = f"error: shard {shards / name} reads differently on rank 1 ("
    assert len(lines) == 1 and want in lines[0] and "than on rank 0 (" in lines[0], lines  # the same line: once
    assert "Traceback" not in proc.stderr and not (tmp_path / "run/checkpoints").exists()


def test_a_rollback_starts_a_branch_that_a_requeue_continues(tmp_path, tiny_roberta, corpus):
    run = tmp_path / "run"
    cfg = _cfg(run, tiny_roberta, corpus, every=2, steps=6)
    cfg["optim"]["grad_accum"] = 1
    path = write_config(tmp_path / "c.yaml", cfg)
    assert launch(["--config", str(path)]).returncode == 0
    old = complete_tags(run / "checkpoints")
    assert old[-1] == tag_for(12)
    # roll back to step 4 with another phase-2 learning rate; the job is preempted at step >= 7
    branch = ["--config", str(path), "--phases.1.lr=2e-3"]
    since = time.time()
    job = _start_session([*branch, "--resume", tag_for(4)], tmp_path / "b.log", 1, "single")
    deadline = time.time() + 300
    while 7 not in logged_since(run / "metrics.jsonl", since):
        assert job.poll() is None and time.time() < deadline, "the branch ended before it could be preempted"
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGUSR1)
    job.wait(timeout=300)
    _wait_for_group(job.pid)
    out = (tmp_path / "b.log").read_text()
    assert job.returncode == PREEMPTED_EXIT_CODE, out[-3000:]
    moved = [t for t in old if int(t[len("global_step"):]) > 4]
    assert f"resuming from {tag_for(4)} starts a new branch: moved {len(moved)} later checkpoint(s)" in out
    abandoned = run / "checkpoints" / ABANDONED / "branch-001"
    assert sorted(p.name for p in abandoned.iterdir() if p.is_dir()) == moved  # moved, not deleted
    stopped = json.loads((run / "status.json").read_text())["global_step"]
    assert complete_tags(run / "checkpoints")[-1] == tag_for(stopped) and 7 <= stopped < 12
    # the requeued job: the same command without --resume continues the new branch
    proc = launch(branch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(stopped)}" in proc.stderr
    rows = read_metrics(run)
    assert rows[8]["train/lr"] > 1e-3  # the branch's phase-2 rate (2e-3, decaying), not the old 5e-4
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    # the abandoned branch's rows after step 4 moved aside; TensorBoard shows each step once
    logged = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["time"] >= since for r in logged if r["step"] > 4)
    assert {json.loads(x)["step"] for x in (run / "metrics.superseded.jsonl").read_text().splitlines()} >= set(
        range(5, 13))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    steps = [e.step for e in events.Scalars("train/loss")]
    assert sorted(steps) == sorted(set(steps)) and max(steps) == 12, steps


def test_out_of_vocabulary_shard_fails_at_start_or_is_skipped(tmp_path, tiny_roberta, corpus):
    """An id >= the tokenizer's vocab size is found when the shards are scanned: 'fail' stops the run before
    the model is set up, with one line naming the shard, the id and the vocab size; 'skip' leaves it out."""
    from xpt_ds.data.tokenizer import build_tokenizer
    vocab = build_tokenizer(str(corpus / "spm.model")).vocab_size
    bad = tmp_path / "oov-000000.tar"
    write_shard(bad, "train", 0, [[[5, 6, 7, 8]]] * 3 + [[[5, vocab + 11, 8]]], vocab_size=65536)
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus)
    cfg["data"]["train_shards"] = [f"{corpus}/manifest.json:train", str(bad)]
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: shard {bad} (document 3) holds token id {vocab + 11} >= vocab size {vocab} of {corpus / 'spm.model'}"
        ": it was made with another tokenizer, or is corrupt")
    assert " parameters; phase " not in proc.stderr  # before the engine was set up, so before any step
    cfg["data"]["on_corrupt_shard"] = "skip"
    cfg["run_dir"] = str(tmp_path / "run2")
    proc = launch(["--config", str(write_config(tmp_path / "c2.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"skipped 1 corrupt shard(s) of 2: {bad}" in proc.stderr
    assert read_metrics(tmp_path / "run2")[8]["data/skipped_shards"] == 1
