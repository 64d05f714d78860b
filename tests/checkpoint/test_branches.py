"""Branches of a run (``xpt_ds.checkpoint.branches``): what a resume from an older tag leaves behind moves to
``abandoned/branch-N/``, a new N each time. Unit-level, on checkpoint directories built by hand."""
import json
import shutil
from pathlib import Path

from xpt_ds.checkpoint import branches
from xpt_ds.checkpoint.tags import MARKER, complete_tags, tag_for


def _tag(root: Path, step: int) -> str:
    d = root / tag_for(step)
    d.mkdir(parents=True)
    (d / "mp_rank_00_model_states.pt").write_bytes(b"x")
    (d / MARKER).write_text(json.dumps({"global_step": step}))
    return d.name


def test_a_deleted_branch_leaves_a_gap_and_no_number_is_taken_twice(tmp_path):
    """The user deletes abandoned/branch-001 while branch-002 is there: the next resume from an older tag moves
    its later checkpoints to branch-003 (counting the entries would pick branch-002 again, and every later resume
    from an older tag would fail on it)."""
    root = tmp_path / "checkpoints"
    for step in (2, 4, 6):
        _tag(root, step)
    assert branches.abandon_later(root, tag_for(4)) == ([tag_for(6)], root / "abandoned/branch-001")
    _tag(root, 6)
    assert branches.abandon_later(root, tag_for(2)) == ([tag_for(4), tag_for(6)], root / "abandoned/branch-002")
    shutil.rmtree(root / "abandoned/branch-001")
    _tag(root, 4)
    moved, dest = branches.abandon_later(root, tag_for(2))
    assert (moved, dest) == ([tag_for(4)], root / "abandoned/branch-003")
    assert complete_tags(dest) == [tag_for(4)] and complete_tags(root / "abandoned/branch-002") == [tag_for(4),
                                                                                                      tag_for(6)]
    assert complete_tags(root) == [tag_for(2)]
