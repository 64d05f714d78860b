"""Which folders of ``checkpoints/`` are the run's tags (``xpt_ds.checkpoint.tags``), plain files only: a folder a
user put there is not one, a tag that links to another run's checkpoint is unlinked, never emptied through the
link, and a marker whose step is not its name's is one line, not a tag that sorts as another step."""
from __future__ import annotations

import json

import pytest

from xpt_ds.checkpoint.tags import (CheckpointError, UnknownTag, complete_tags, prune, remove_incomplete, resolve_tag,
                                    tag_for)
from xpt_ds.checkpoint.universal import drop_converted


def _tag(root, step: int, name: str | None = None, marker: bool = True):
    tag = root / (name or tag_for(step))
    tag.mkdir(parents=True)
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"weights")
    if marker:
        (tag / "COMPLETE").write_text(json.dumps({"global_step": step}))
    return tag


def test_a_linked_tag_is_unlinked_and_the_other_runs_checkpoint_kept(tmp_path):
    """A run resumed from another run's checkpoint through a symbolic link (no copy of its gigabytes), with
    keep_last 1: until 2026-12-04 the prune deleted the other run's marker through the link, then failed on the
    link ("Cannot call rmtree on a symbolic link"), and the other run later resumed from an older tag."""
    other = _tag(tmp_path / "other/checkpoints", 4)
    ckpt = tmp_path / "run/checkpoints"
    ckpt.mkdir(parents=True)
    (ckpt / tag_for(4)).symlink_to(other)
    _tag(ckpt, 6)
    assert complete_tags(ckpt) == [tag_for(4), tag_for(6)]
    (other / "universal").mkdir()  # the other run's copy at another scale: its own, not this run's to drop
    (other / "universal/zero").write_bytes(b"state")
    assert drop_converted(ckpt) == [] and (other / "universal/zero").is_file()
    removed = prune(ckpt, keep_last=1)
    assert removed == [(tag_for(4), other)] and str(removed[0]) == f"{tag_for(4)} (a link; its target {other} is kept)"
    assert not (ckpt / tag_for(4)).exists() and not (ckpt / tag_for(4)).is_symlink()
    assert complete_tags(other.parent) == [tag_for(4)] and (other / "mp_rank_00_model_states.pt").is_file()
    unfinished = _tag(tmp_path / "other/checkpoints", 8, marker=False)  # a save of the other run under way
    (ckpt / tag_for(8)).symlink_to(unfinished)
    assert remove_incomplete(ckpt) == [(tag_for(8), unfinished)]
    assert not (ckpt / tag_for(8)).is_symlink() and (unfinished / "mp_rank_00_model_states.pt").is_file()


def test_a_folder_not_named_as_a_tag_is_left_alone(tmp_path):
    """A user's copy of a tag under another name (``backup_before_extension``) was a tag: keep_last deleted it,
    and it could tie with the real one for the newest."""
    ckpt = tmp_path / "checkpoints"
    backup = _tag(ckpt, 4, name="backup_before_extension")
    for step in (4, 6, 8):
        _tag(ckpt, step)
    assert complete_tags(ckpt) == [tag_for(4), tag_for(6), tag_for(8)]
    assert prune(ckpt, keep_last=1) == [(tag_for(4), None), (tag_for(6), None)] and backup.is_dir()
    assert remove_incomplete(ckpt) == [] and backup.is_dir()
    with pytest.raises(UnknownTag, match=r"--resume 'backup_before_extension' is not a complete checkpoint of run "
                                         rf".* \(not a tag's name, such as {tag_for(1)}\); valid: auto, or a "
                                         rf"complete checkpoint: {tag_for(8)}$"):
        resolve_tag(ckpt, "backup_before_extension", flag="--resume")


def test_a_marker_whose_step_is_not_its_names_is_one_line(tmp_path):
    """``{"global_step": 999}`` in step 1's marker (a hand edit, as the error for an emptied marker suggests one)
    made step 1 the newest: export shipped its weights, and a resume went back to it and wrote over steps 2-4."""
    ckpt = tmp_path / "checkpoints"
    for step in (1, 2, 4):
        _tag(ckpt, step)
    (ckpt / tag_for(1) / "COMPLETE").write_text(json.dumps({"global_step": 999}))
    with pytest.raises(CheckpointError) as e:
        complete_tags(ckpt)
    assert str(e.value) == (f"checkpoint {tag_for(1)}: {ckpt / tag_for(1) / 'COMPLETE'} records global_step 999, not "
                            f"the 1 of its name; if the tag is otherwise whole, rewrite it as {{\"global_step\": 1}}, "
                            "else move the tag out of the run's checkpoints/")
