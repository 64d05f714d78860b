"""A checkpoint that cannot be written (disk full, no permission) gives a one-line error naming the directory
and the cause, leaves the previous complete checkpoint as it was, and the same command resumes from it once
the cause is gone. Uses a real small filesystem (tmpfs) and a real immutable directory (chattr +i), so it
needs root; it skips where those are not available."""
import os
import shutil
import subprocess

import pytest

from conftest import base_config, launch, write_config
from xpt_ds.training.checkpoint import complete_tags, tag_for
from xpt_ds.training.export import load_checkpoint_fp32


def _run_cfg(tmp_path, run, tiny_roberta, corpus):
    """Phase 1 ends at step 2; phase 2 runs to step 8 (a first run stops it at step 3)."""
    cfg = base_config(run, tiny_roberta, corpus, checkpoint={"every_steps": 2})
    cfg["phases"][0]["steps"], cfg["phases"][1]["steps"] = 2, 6
    cfg["logging"]["tensorboard"] = False
    return write_config(tmp_path / "c.yaml", cfg)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, tiny_roberta, corpus):
    """Phase 1 and one step of phase 2 (tags 2 and 3), trained on 2 ranks; the test copies it."""
    root = tmp_path_factory.mktemp("first_run")
    proc = launch(["--config", str(_run_cfg(root, root / "run", tiny_roberta, corpus)), "--phases.1.steps=1"], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run"


def _copy(first_run, run, tmp_path, tiny_roberta, corpus):
    """The first run at ``run``, and the config that goes on with it there."""
    shutil.copytree(first_run, run)
    return _run_cfg(tmp_path, run, tiny_roberta, corpus)


def _error(proc):
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc.stderr.strip().splitlines()[-1]


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs (the test fills it to the size it wants)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and `mount -t tmpfs` for a real small filesystem")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


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


def test_unwritable_then_disk_full_before_and_while_writing(tmp_path, tiny_roberta, corpus, small_disk, first_run):
    """The same command four times on one run directory, as a user retries it: with the checkpoint directory
    not writable (``chattr +i``); with less free space than the last checkpoint took (caught before anything is
    written); with enough for a phase-1 checkpoint but not for the bigger phase-2 one, whose optimizer state
    covers every parameter (the kernel's ENOSPC in the middle of the save); then with every cause gone, when it
    resumes from the checkpoint all three failures left intact."""
    run = small_disk / "run"
    cfg = _copy(first_run, run, tmp_path, tiny_roberta, corpus)
    ckpt = run / "checkpoints"
    first, second = _size(ckpt / tag_for(2)), _size(ckpt / tag_for(3))
    assert second > first + 200 * 1024  # phase 2 keeps Adam moments for every parameter
    shutil.rmtree(ckpt / tag_for(3))
    before = load_checkpoint_fp32(ckpt, tag_for(2))

    unwritable = _immutable(ckpt, True)
    if unwritable:
        try:
            last = _error(launch(["--config", str(cfg)], nproc=2, launcher="deepspeed"))
        finally:
            _immutable(ckpt, False)
        assert last == f"error: cannot write checkpoints in {ckpt}: Operation not permitted"  # every rank says so
        assert complete_tags(ckpt) == [tag_for(2)]

    for when, leave in (("before writing", first // 2), ("while writing", first + 100 * 1024)):
        _fill(small_disk, leave)
        proc = launch(["--config", str(cfg)], nproc=2, launcher="deepspeed")  # resumes at 2; saves at 4, in phase 2
        last = _error(proc)
        if when == "before writing":
            assert last.startswith(f"error: not enough space for a checkpoint in {ckpt}: ") and tag_for(2) in last
            assert not (ckpt / tag_for(4)).exists()
        else:
            errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
            assert errors and all(x.endswith(f"the newest complete checkpoint ({tag_for(2)}) is intact")
                                  for x in errors)
            # the rank(s) that hit the full disk say so, as the OS put it; any other rank says a peer failed
            full = [x for x in errors if x.startswith(f"error: cannot write checkpoint {ckpt / tag_for(4)} on rank ")]
            assert full and all(": No space left on device; " in x for x in full), errors
            assert all(x in full or "because another rank failed" in x for x in errors), errors
            assert "enforce fail" not in proc.stderr and "Connection closed" not in proc.stderr
        assert complete_tags(ckpt) == [tag_for(2)], when
        after = load_checkpoint_fp32(ckpt, tag_for(2))
        assert all((before[k] == after[k]).all() for k in before), when
        (small_disk / "filler").unlink()

    proc = launch(["--config", str(cfg)], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(2)}" in proc.stderr
    assert complete_tags(ckpt) == [tag_for(2), tag_for(4), tag_for(6), tag_for(8)]  # the partial one is gone
    if not unwritable:  # everything else passed; say what was not checked
        pytest.skip("the not-writable step needs root and `chattr +i` on this filesystem")
