"""A checkpoint that cannot be written (disk full, no permission) gives a one-line error naming the directory
and the cause, leaves the previous complete checkpoint as it was, and the same command resumes from it once
the cause is gone. Uses a real small filesystem (tmpfs) and a real immutable directory (chattr +i), so it
needs root; it skips where those are not available."""
import os
import shutil
import subprocess

import pytest

from conftest import REPO, base_config, launch, small_tmpfs, write_config
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import complete_tags, tag_for


def _retry_cfg(tmp_path, run, tiny_roberta, corpus):
    """``engine_runs``' run (phase 1 ends at step 4, phase 2 at 8, both ranks), resumed at ``run`` from its
    phase-1 checkpoint with a checkpoint every 2 steps: the first save is at step 6, in phase 2."""
    cfg = base_config(run, tiny_roberta, corpus, deepspeed=str(REPO / "ds_configs/zero2_fp32.json"),
                      checkpoint={"every_steps": 2})
    cfg["logging"]["tensorboard"] = False
    return write_config(tmp_path / "c.yaml", cfg)


def _error(proc):
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc.stderr.strip().splitlines()[-1]


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs (the test fills it to the size it wants)."""
    with small_tmpfs(tmp_path / "disk", "64m") as mnt:
        yield mnt


def _fill(disk, leave: int):
    """Fill ``disk`` until ``leave`` bytes are free."""
    free = shutil.disk_usage(disk).free
    with open(disk / "filler", "wb") as f:
        f.write(b"\0" * (free - leave))
    assert abs(shutil.disk_usage(disk).free - leave) < 64 * 1024


def _size(tag_dir):
    return sum(f.stat().st_size for f in tag_dir.rglob("*") if f.is_file())


def _immutable(path, on: bool) -> bool:
    """``chattr +i`` (or ``-i``): a directory even root cannot write in. False where that is not available."""
    return os.geteuid() == 0 and subprocess.run(["chattr", "+i" if on else "-i", str(path)],
                                                capture_output=True).returncode == 0


def test_unwritable_then_disk_full_before_and_while_writing(tmp_path, tiny_roberta, corpus, small_disk, engine_runs):
    """The same command four times on one run directory, as a user retries it: with the checkpoint directory
    not writable (``chattr +i``: said at start, before a step a save would lose); with less free space than the
    last checkpoint took (caught before anything is written); with enough for a phase-1 checkpoint but not for
    the bigger phase-2 one, whose optimizer state covers every parameter (the kernel's ENOSPC in the middle of
    the save); then with every cause gone, when it resumes from the checkpoint all three failures left intact.
    The run directory is a copy of the 2-rank ZeRO-2 run test_frozen reads (``conftest.engine_runs``), its
    end-of-run checkpoint removed."""
    run = small_disk / "run"
    shutil.copytree(engine_runs("zero2_fp32"), run)
    cfg = _retry_cfg(tmp_path, run, tiny_roberta, corpus)
    ckpt = run / "checkpoints"
    first, second = _size(ckpt / tag_for(4)), _size(ckpt / tag_for(8))
    assert second > first + 200 * 1024  # phase 2 keeps Adam moments for every parameter
    shutil.rmtree(ckpt / tag_for(8))
    before = load_checkpoint_fp32(ckpt, tag_for(4))

    unwritable = _immutable(ckpt, True)
    if unwritable:
        logged = (run / "metrics.jsonl").read_text()
        try:
            last = _error(launch(["--config", str(cfg)], nproc=2, launcher="deepspeed"))
        finally:
            _immutable(ckpt, False)
        assert last == f"error: cannot write checkpoints in {ckpt}: Operation not permitted"  # every rank says so
        assert complete_tags(ckpt) == [tag_for(4)]
        assert (run / "metrics.jsonl").read_text() == logged  # said at start, before any step that a save would lose

    for when, leave in (("before writing", first // 2), ("while writing", first + 100 * 1024)):
        _fill(small_disk, leave)
        proc = launch(["--config", str(cfg)], nproc=2, launcher="deepspeed")  # resumes at 4; saves at 6, in phase 2
        last = _error(proc)
        if when == "before writing":
            assert last.startswith(f"error: not enough space for a checkpoint in {ckpt}: ") and tag_for(4) in last
            assert not (ckpt / tag_for(6)).exists()
        else:
            errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
            assert errors and all(x.endswith(f"the newest complete checkpoint ({tag_for(4)}) is intact")
                                  for x in errors)
            # the rank(s) that hit the full disk say so, as the OS put it; any other rank says a peer failed
            full = [x for x in errors if x.startswith(f"error: cannot write checkpoint {ckpt / tag_for(6)} on rank ")]
            assert full and all(": No space left on device; " in x for x in full), errors
            assert all(x in full or "because another rank failed" in x for x in errors), errors
            assert "enforce fail" not in proc.stderr and "Connection closed" not in proc.stderr
        assert complete_tags(ckpt) == [tag_for(4)], when
        after = load_checkpoint_fp32(ckpt, tag_for(4))
        assert all((before[k] == after[k]).all() for k in before), when
        (small_disk / "filler").unlink()

    proc = launch(["--config", str(cfg)], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(4)}" in proc.stderr
    assert complete_tags(ckpt) == [tag_for(4), tag_for(6), tag_for(8)]  # the partial one is gone
    if not unwritable:  # everything else passed; say what was not checked
        pytest.skip("the not-writable step needs root and `chattr +i` on this filesystem")


def test_the_space_check_counts_neither_universal_copy_nor_what_a_stopped_conversion_left(tmp_path, monkeypatch):
    """A save needs the space the newest checkpoint takes, but not its universal copy (derived data) nor the
    ``universal.tmp/`` a conversion killed mid-write leaves: neither is written by a save. Unit-level: a tag of
    1 MiB with 8 MiB in each, and a disk with 2 MiB free."""
    from collections import namedtuple

    from xpt_ds.checkpoint import store
    root = tmp_path / "checkpoints"
    for path, size in (("model_states.pt", 1), ("universal/zero/w/fp32.pt", 8), ("universal.tmp/zero/w/fp32.pt", 8)):
        (root / tag_for(2) / path).parent.mkdir(parents=True, exist_ok=True)
        (root / tag_for(2) / path).write_bytes(b"\0" * (size << 20))
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(store.shutil, "disk_usage", lambda path: usage(64 << 20, 62 << 20, 2 << 20))
    assert store._preflight(root, tag_for(2), 0) is None
    monkeypatch.setattr(store.shutil, "disk_usage", lambda path: usage(64 << 20, 63.5 * 2**20, 2**19))
    assert store._preflight(root, tag_for(2), 0) == (f"not enough space for a checkpoint in {root}: 0.5 MiB free, "
                                                     f"the newest one ({tag_for(2)}) takes 1.0 MiB")
