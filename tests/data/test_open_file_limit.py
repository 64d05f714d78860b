"""The open-file limit (``ulimit -n``): the shard reader's cap follows it, a DataLoader worker that runs out of
descriptors ends quietly and says so to its rank. (A whole run under ``ulimit -n 64``:
tests/runtime/test_train_ends.py.)"""
import os
import resource

import numpy as np
import pytest
import torch

from conftest import write_shard
from xpt_ds.data import shards as shards_mod
from xpt_ds.data.workers import Workers


@pytest.mark.parametrize("soft, cap", [(1024, 224), (256, 32), (64, shards_mod.MIN_OPEN), (20000, 4096),
                                       (resource.RLIM_INFINITY, 4096)])
def test_the_readers_cap_is_a_share_of_the_soft_limit_within_bounds(monkeypatch, soft, cap):
    monkeypatch.setattr(shards_mod.resource, "getrlimit", lambda which: (soft, resource.RLIM_INFINITY))
    assert shards_mod.open_file_cap() == cap


@pytest.fixture
def soft_limit():
    """Set this process's soft open-file limit for the test; the old one comes back after it."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield lambda soft: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, before[1]))
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_a_reader_keeps_as_many_shards_open_as_the_soft_limit_allows(tmp_path, soft_limit):
    """Under a soft limit of 200, a reader keeps (200 - 128) / 4 = 18 of 30 shards open, the least recently read
    closed first; the cap is read at its first read (in a DataLoader worker: the worker's own limit)."""
    paths = [write_shard(tmp_path / f"s{s:03d}.tar", [np.arange(s, s + 5)]) for s in range(30)]
    indexes, _ = shards_mod.scan_shards(paths, "fail")
    soft_limit(200)
    reader = shards_mod.DocReader(indexes)

    def open_shards() -> list[str]:
        fds = [os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
        return sorted(p for p in fds if p in paths)

    for s in list(range(30)) * 2:
        assert list(reader.read(s, 0)) == list(range(s, s + 5))
    assert open_shards() == paths[-18:]
    reader.close()


class _RunsOut:
    """A plan whose batch lowers its worker's soft limit to the descriptors it holds: handing the batch over (a
    descriptor per tensor, torch's file_descriptor sharing) then runs out, in the queue's feeder thread."""

    n_batches = None

    def __init__(self, first):
        """``Workers.run(first)`` makes a plan from the sequence it starts at; every batch here is the same."""

    def batch(self, b):
        held = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (held, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        return {"input_ids": torch.arange(4)}


def test_a_worker_that_runs_out_of_descriptors_ends_quietly_and_tells_its_rank(capfd):
    """torch's DataLoader printed the worker's feeder-thread traceback (``reduce_storage`` -> ``DupFd``: EMFILE) and
    dropped the batch; now the worker sets the shared flag and exits, and the rank's next fails (at torch's check of
    its workers) with the flag set, which MLMBatchStream turns into an EMFILE OSError."""
    workers = Workers(_RunsOut, 1, timeout=0)  # 0: torch checks its workers every 5 s while it waits
    try:
        with pytest.raises(RuntimeError, match="exited unexpectedly"):
            next(workers.run(0))
        assert workers.ran_out_of_files
    finally:
        workers.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Too many open files" not in err, err

