"""xpt_ds.data.workers: a stream's DataLoader workers are forked once and serve every pass, resume and rewind.

A rank that forks while gloo's threads free finished collectives can leave the child deadlocked (CPython
gh-112275, on the CI machine's Python 3.11.7). So the trainer forks every stream's workers when it is built,
before the engine exists, and restarts the same processes afterwards: the batches must be those of a stream
built in the calling process, and no worker may be forked once the engine is built (checked through the real
``xpt_ds.cli.train`` entry point, with a ZeRO-3 engine and validation after every step). Workers that stall anyway
are forked again at the stream's sequence."""
import multiprocessing
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
import torch
import yaml
from data_builders import BIG_VOCAB, data_config

from conftest import REPO, base_config, read_metrics, run_main, write_config
from xpt_ds.data.mlm import MLMBatchStream, MLMMasker, build_stream


def _stream(shards, workers: int, single_pass: bool = False) -> MLMBatchStream:
    cfg = data_config(shards)
    return MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB), 2, 0, 1, workers,
                          single_pass=single_pass)


def _pids(stream: MLMBatchStream) -> list[int]:
    """The live worker processes of ``stream``."""
    it = stream.workers._loader._iterator
    return [w.pid for w in it._workers if w.is_alive()]


def _same(got: list[dict], want: list[dict]) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _take(stream, n: int, at: int | None = None) -> list[dict]:
    if at is not None:
        stream.load_state_dict({"sequences": at})
    return [next(stream) for _ in range(n)]


def test_training_workers_forked_once_serve_the_start_a_resume_and_a_rewind(unique_shards):
    shards, _ = unique_shards
    plain, stream = _stream(shards, 0), _stream(shards, 2)
    stream.fork_workers()
    pids = _pids(stream)
    assert len(pids) == 2
    try:
        _same(_take(stream, 5, at=6), _take(plain, 5, at=6))  # a resume: the first batch is at sequence 6
        _same(_take(stream, 3, at=2), _take(plain, 3, at=2))  # a rewind (a phase's start_from), mid-prefetch
        _same(_take(stream, 4), _take(plain, 4))
        assert _pids(stream) == pids
    finally:
        stream.close()
    assert not any(os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z" for p in pids)
    _same(_take(stream, 2, at=4), _take(plain, 2, at=4))  # closed: forked again where asked
    again = _pids(stream)
    stream.close()
    assert len(again) == 2 and not set(again) & set(pids)


def test_validation_workers_forked_once_give_the_same_pass_every_time(unique_shards):
    shards, _ = unique_shards
    plain = list(_stream(shards, 0, single_pass=True))
    assert len(plain) > 2
    stream = _stream(shards, 2, single_pass=True)
    stream.fork_workers()
    pids = _pids(stream)
    try:
        for _ in range(3):  # as the trainer's evaluate: rewind to 0, then to the end
            stream.load_state_dict({"sequences": 0})
            _same(list(stream), plain)
        assert _pids(stream) == pids
    finally:
        stream.close()


def test_workers_forked_before_their_first_batch_build_none(unique_shards, tmp_path, monkeypatch):
    """Forked idle: a worker builds no batch until the stream asks for its first (they would come from
    sequence 0, which a resume would then drop)."""
    from xpt_ds.data import mlm
    built = tmp_path / "built"
    batch = mlm._BatchPlan.batch

    def counted(plan, b):
        with open(built, "a") as f:
            f.write(f"{plan.first} {b}\n")
        return batch(plan, b)
    monkeypatch.setattr(mlm._BatchPlan, "batch", counted)
    shards, _ = unique_shards
    stream = _stream(shards, 2)
    stream.fork_workers()
    try:
        import time
        time.sleep(1.0)  # time to prefetch, were the workers running
        assert len(_pids(stream)) == 2 and not built.exists()
        next(stream)
    finally:
        stream.close()
    assert built.read_text().split("\n")[0].split()[0] == "0"


def _record(monkeypatch, events):
    """Patches (run_main forks: they go with it) that write each start of worker processes and each engine
    build to ``events``, in order."""
    from xpt_ds.data import workers
    from xpt_ds.training import engine as engines
    make_loader, build_engine = workers.Workers._make_loader, engines.build_engine

    def note(what):
        with open(events, "a") as f:
            f.write(what + "\n")

    def loader(self):
        note(f"fork {self.num_workers}")
        return make_loader(self)

    def engine(*args, **kwargs):
        note("engine")
        return build_engine(*args, **kwargs)
    monkeypatch.setattr(workers.Workers, "_make_loader", loader)
    monkeypatch.setattr(engines, "build_engine", engine)


@pytest.mark.multiproc
def test_no_worker_is_forked_once_the_engine_is_built(tiny_roberta, corpus, tmp_path, monkeypatch):
    """One rank under ZeRO-3 (its parameter fetches are asynchronous collectives), validation after every step,
    both phases (a new engine at the switch): the two streams' workers are forked before the first engine, and
    never again."""
    _record(monkeypatch, tmp_path / "events")
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus, deepspeed=str(REPO / "ds_configs/zero3_fp32.json"))
    cfg["phases"] = [{**p, "steps": 2} for p in cfg["phases"]]
    cfg["logging"].update(eval_every=1, eval_batches=0)
    r = run_main("xpt_ds.cli.train", ["--config", str(write_config(tmp_path / "c.yaml", cfg))])
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "events").read_text().split("\n")[:-1] == ["fork 2", "fork 2", "engine", "engine"]
    valid = [m for m in read_metrics(tmp_path / "run").values() if "valid/loss" in m]
    assert len(valid) >= 4  # a pass after each step: four on the same two workers


@pytest.mark.multiproc
def test_a_trelm_run_forks_its_english_stream_with_the_target_one(tmp_path, source_dir, corpus_bert,  # noqa: F811
                                                                   english, monkeypatch):  # noqa: F811
    """TreLM's shipped four-phase graph (English MLM beside the target's, branches that rewind the streams to
    where 'common' ended) with 2 workers per stream: both streams fork before the first engine, never after."""
    from trelm_builders import write_parallel
    from trelm_builders import three_phase_config
    _record(monkeypatch, tmp_path / "events")
    parallel, _ = write_parallel(tmp_path / "par", corpus_bert)
    config = three_phase_config(tmp_path / "run", source_dir, corpus_bert, english, parallel)
    cfg = yaml.safe_load(config.read_text())
    cfg["data"]["num_workers"] = 2
    config.write_text(yaml.safe_dump(cfg))
    r = run_main("xpt_ds.cli.train", ["--config", str(config)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "phase 'x_en' starts at global step 4 from the end of 'common'" in r.stderr
    assert (tmp_path / "events").read_text().split("\n")[:-1] == ["fork 2", "fork 2"] + ["engine"] * 4


def _stuck_once(marker):
    """A worker_init_fn that blocks the first worker that runs it, as a worker deadlocked at its start would."""
    def init(worker_id):
        import time
        try:
            marker.touch(exist_ok=False)  # the first worker only
        except FileExistsError:
            return
        time.sleep(3600)
    return init


def test_workers_that_deliver_nothing_are_restarted_at_the_same_sequence(unique_shards, tmp_path, monkeypatch,
                                                                          caplog):
    """A DataLoader worker that never starts (CPython 3.11 can deadlock a forked child in its after-fork cleanup)
    held a rank, and the job, for good. A stream whose workers deliver no batch in worker_timeout_s restarts them
    where it is: the same batches as a stream that never stalled."""
    shards, _ = unique_shards
    cfg = data_config(shards)
    plain = MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB), 2, 0, 1, 0)
    want = [next(plain) for _ in range(5)]
    monkeypatch.setattr(MLMBatchStream, "worker_init_fn", staticmethod(_stuck_once(tmp_path / "stuck")))
    monkeypatch.setattr(MLMBatchStream, "worker_timeout_s", 2.0)
    stream = MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB), 2, 0, 1, 2)
    with caplog.at_level("WARNING"):
        got = [next(stream) for _ in range(5)]
    stream.close()
    assert (tmp_path / "stuck").exists() and "no batch from the DataLoader workers in 2 s" in caplog.text
    assert "forking new ones at sequence" in caplog.text
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_shard_gone_after_the_scan_stops_the_stream_with_one_line_naming_it(unique_shards, workers):
    """A shard moved away (a cleanup, an NFS hiccup) after the start-up scan: the batch that reads it raises one
    line naming the file, from a worker as from the calling process, never a worker's traceback."""
    from xpt_ds.data.shards import DataError
    shards, _ = unique_shards
    stream = _stream(shards, workers)
    for s in shards:
        os.rename(s, f"{s}.moved")
    with pytest.raises((DataError, OSError)) as e:
        _take(stream, 4)
    stream.close()
    assert str(e.value) in {f"{s}: No such file or directory" for s in shards} or (
        workers == 0 and e.value.strerror == "No such file or directory"), str(e.value)


def _serve(shards, out) -> None:
    """A rank, as far as its workers see: a stream with 2 of them, one batch taken, then nothing."""
    stream = _stream(shards, 2)
    next(stream)
    out.send(_pids(stream))
    time.sleep(600)


def test_workers_die_with_their_rank(unique_shards):
    """A rank killed outright (``kill -9``, the out-of-memory killer) left its workers alive until torch's check
    of their parent, up to 5 s later, with their memory and the run directory's lock (a job restarted meanwhile
    was refused): they die with it now."""
    shards, _ = unique_shards
    ours, theirs = multiprocessing.Pipe()
    rank = multiprocessing.get_context("fork").Process(target=_serve, args=(shards, theirs))
    rank.start()
    try:
        assert ours.poll(120), "no batch"
        workers = [psutil.Process(pid) for pid in ours.recv()]
    finally:
        os.kill(rank.pid, signal.SIGKILL)
        rank.join()
    assert len(workers) == 2
    deadline = time.monotonic() + 2.0  # a SIGKILL takes milliseconds; torch's own check, up to 5 s

    def alive(p: psutil.Process) -> bool:
        try:
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    while any(map(alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = [p.pid for p in workers if alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"workers {left} outlived their rank"


def _rank_gone_before_its_worker_starts(started: str, outlived: str) -> None:
    """A fake rank that forks a worker and ends at once; the worker starts (``die_with_parent``) only after."""
    import xpt_ds.data.workers as w
    w._FORKED_BY = os.getpid()  # as Workers.run records it before the DataLoader forks
    if os.fork() == 0:
        while os.getppid() == w._FORKED_BY:
            time.sleep(0.005)
        Path(started).write_text("")
        w.die_with_parent()
        Path(outlived).write_text("")
        os._exit(0)
    os._exit(0)


def test_a_worker_that_starts_after_its_rank_ended_ends_at_once(tmp_path):
    """Under load a worker can run its start after its rank was killed: the kernel's parent-death signal is then
    never sent, and until 2026-12-04 the check for it read the parent's pid after the fork, where a parent already
    gone reads as its reaper's, so the worker lived on until torch's own check (CI saw one outlive its rank)."""
    started, outlived = tmp_path / "started", tmp_path / "outlived"
    rank = multiprocessing.get_context("fork").Process(target=_rank_gone_before_its_worker_starts,
                                                       args=(str(started), str(outlived)))
    rank.start()
    rank.join()
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    assert started.exists() and not outlived.exists()
