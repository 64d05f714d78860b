"""A universal-checkpoint conversion (a resume at another world size or ZeRO stage) on a disk without room for it:
one line that names the checkpoint's disk as full, nothing of the conversion left that a later resume could take
for complete, and the same conversion succeeds once there is room. A real small filesystem (tmpfs: root only)."""
import shutil

import pytest
import torch

from conftest import small_tmpfs
from xpt_ds.checkpoint import universal, universal_stages
from xpt_ds.checkpoint.tags import CheckpointError, tag_for


@pytest.fixture
def tag_on_small_disk(tmp_path, engine_runs):
    """``engine_runs``' ZeRO-2 phase-1 checkpoint (2 ranks, shared with other tests: copied) on a 16 MiB tmpfs;
    (tag folder, bytes of its optimizer state)."""
    with small_tmpfs(tmp_path / "disk", "16m") as disk:
        tag = shutil.copytree(engine_runs("zero2_fp32") / "checkpoints" / tag_for(4), disk / tag_for(4))
        yield tag, sum(p.stat().st_size for p in tag.glob("*optim_states.pt"))


def _fill(disk, leave: int):
    with open(disk / "filler", "wb") as f:
        f.write(b"\0" * (shutil.disk_usage(disk).free - leave))


def _left(tag) -> list[str]:
    return sorted(p.name for p in tag.iterdir() if "universal" in p.name)


def test_a_conversion_that_runs_out_of_space_says_the_disk_is_full_and_keeps_nothing(tag_on_small_disk):
    """Room for the optimizer state once but not for the copy (about 1.5 times it): ds_to_universal's torch.save
    failed with '[enforce fail at inline_container.cc] . unexpected pos N vs M', which said nothing of the disk."""
    tag, state = tag_on_small_disk
    _fill(tag.parent, int(1.2 * state))
    with pytest.raises(CheckpointError) as e:
        universal._convert(tag / "universal", 5)
    assert str(e.value).startswith(f"the disk holding checkpoint {tag} is full: writing its universal copy "
                                   "(universal/) ran out of space ("), str(e.value)
    assert "\n" not in str(e.value) and "nothing of it was kept" in str(e.value)
    assert _left(tag) == []
    (tag.parent / "filler").unlink()
    universal._convert(tag / "universal", 5)  # room again: the same conversion completes
    assert _left(tag) == ["universal"] and (tag / "universal" / "zero" / "optimizer_state.pt").is_file()


def test_a_disk_without_room_for_the_optimizer_state_once_is_refused_before_converting(tag_on_small_disk,
                                                                                        monkeypatch):
    tag, state = tag_on_small_disk
    _fill(tag.parent, state // 2)
    monkeypatch.setattr(universal, "tethered", None)  # no conversion may start
    with pytest.raises(CheckpointError) as e:
        universal._convert(tag / "universal", 5)
    assert str(e.value).startswith(f"the disk holding checkpoint {tag} has "), str(e.value)
    assert f"too little for its universal copy (universal/); the copy takes about 1.5 times the checkpoint's " \
           f"{state / 2**20:,.1f} MiB of optimizer state; nothing of it was kept" in str(e.value)
    assert _left(tag) == []


def test_a_fit_that_runs_out_of_space_leaves_no_partial_file(tmp_path, monkeypatch):
    """``fit_for`` rewrites files of a complete conversion, each under a temporary name: torch.save's short write
    (RuntimeError, no errno) on a full disk was taken for a damaged copy ('delete it'), and left its .tmp."""
    folder = tmp_path / "global_step000000004" / "universal"
    (folder / "zero").mkdir(parents=True)

    def short_write(value, path):
        with open(path, "wb") as f:
            f.write(b"PK\3\4")
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4352 vs 4240")

    monkeypatch.setattr(universal_stages.torch, "save", short_write)
    with pytest.raises(CheckpointError) as e:
        universal_stages._save({"step": torch.tensor(1.0)}, folder / "zero" / "optimizer_state.pt")
    assert str(e.value).startswith(f"the disk holding checkpoint {folder.parent} is full: writing its universal "
                                   "copy (universal/) ran out of space ("), str(e.value)
    assert "the copy is complete and the next resume finishes fitting it" in str(e.value)
    assert list((folder / "zero").iterdir()) == []
