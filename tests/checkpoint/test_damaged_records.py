"""Small records a run writes whole (atomically) beside its checkpoints, found cut short, emptied or of another
shape (a copy or sync of the run gone wrong): ``best.json``, a tag's ``hf_config/config.json``, a phase end's
``NAME.json`` and a tag's universal copy. Each is one line naming the file and what to do, never a traceback.
Unit-level: the functions the commands call, on files written here."""
from __future__ import annotations

import json
import types

import pytest
import torch
from transformers import RobertaConfig

from xpt_ds.checkpoint.tags import MARKER, CheckpointError, NoBestError, bad_resume, resolve_tag, tag_for

DAMAGED = ['{"tag": "global_step0000000', "", "{}", "[]", '{"tag": 6}', '{"tag": ""}']


def _run_with_a_tag(root):
    tag_dir = root / "checkpoints" / tag_for(6)
    tag_dir.mkdir(parents=True)
    (tag_dir / MARKER).write_text(json.dumps({"global_step": 6}))
    return root, tag_dir


@pytest.mark.parametrize("text", DAMAGED)
def test_a_damaged_best_json_is_one_line_for_tag_and_resume_best(tmp_path, text):
    run, _ = _run_with_a_tag(tmp_path / "run")
    (run / "best.json").write_text(text)
    with pytest.raises(NoBestError) as info:
        resolve_tag(run / "checkpoints", "best")
    line = str(info.value)
    assert line.startswith(f"--tag best: run {run}: {run / 'best.json'} is not the record a run writes (")
    assert "\n" not in line and "valid: auto, or a complete checkpoint" in line  # not 'best' among them
    cfg = types.SimpleNamespace(run_dir=str(run), checkpoint=types.SimpleNamespace(resume="best"))
    said = bad_resume(cfg)  # before the run directory is locked or written
    assert said is not None and said.startswith("--resume best: ") and str(run / "best.json") in said
    (run / "best.json").write_text(json.dumps({"tag": tag_for(6), "step": 6, "valid_loss": 5.0}))
    assert resolve_tag(run / "checkpoints", "best") == tag_for(6)


@pytest.mark.parametrize("text", ['{"model_type": "roberta", "vocab_si', "", "[]"])
def test_a_cut_hf_config_is_one_line_on_resume(tmp_path, text):
    """What ``export.checkpoint_config`` says for evaluate and export, the resume's model check says too."""
    from xpt_ds.checkpoint.tag_checks import check_same_model
    _, tag_dir = _run_with_a_tag(tmp_path / "run")
    path = tag_dir / "hf_config" / "config.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(CheckpointError) as info:
        check_same_model(tag_dir, RobertaConfig())
    assert str(info.value).startswith(f"checkpoint {tag_dir}: cannot read {path} (") and "\n" not in str(info.value)


@pytest.mark.parametrize("text", ['{"digest": "ab', "", "[]", '{"digest": "ab"}'])
def test_a_cut_phase_end_record_is_one_line(tmp_path, text):
    from safetensors.torch import save_file

    from xpt_ds.checkpoint.phase_ends import PHASE_ENDS, load_phase_end
    base = tmp_path / "checkpoints" / PHASE_ENDS
    base.mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(base / "phase1.safetensors"))
    (base / "phase1.json").write_text(text)
    with pytest.raises(CheckpointError) as info:
        load_phase_end(tmp_path / "checkpoints", "phase1", "ab")
    assert str(info.value).startswith(f"{base / 'phase1.json'} is not the record phase 'phase1' ended with (")
    assert "\n" not in str(info.value)


def _universal(folder):
    """A universal copy as a ZeRO-1/2 checkpoint's conversion writes it (DeepSpeed 0.19), of two parameters."""
    shapes = {"w": torch.Size([2, 3]), "b": torch.Size([3])}
    for name, shape in shapes.items():
        (folder / "zero" / name).mkdir(parents=True)
        for key in ("fp32", "exp_avg", "exp_avg_sq"):
            torch.save({"param": torch.zeros(shape)}, folder / "zero" / name / f"{key}.pt")
        torch.save(torch.tensor(1.0), folder / "zero" / name / "step.pt")
    torch.save({"param_shapes": [shapes], "ds_version": "0.19.0"}, folder / "mp_rank_00_model_states.pt")
    torch.save({"ds_version": "0.19.0", "param_groups": [{"lr": 1e-3, "params": [0, 1]}]},
               folder / "zero" / "optimizer_state.pt")
    return folder


def _empty(folder):
    for path in sorted(folder.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()


def _no_fp32(folder):
    (folder / "zero" / "w" / "fp32.pt").unlink()
    (folder / "zero" / "w" / "step.pt").unlink()


def _no_exp_avg(folder):  # ZeRO-1/2's loader: "ValueError: exp_avg not found in optimizer state fragment"
    (folder / "zero" / "b" / "exp_avg.pt").unlink()


def _cut(folder):
    path = folder / "zero" / "optimizer_state.pt"
    path.write_bytes(path.read_bytes()[:100])


@pytest.mark.parametrize("stage", [1, 3])
@pytest.mark.parametrize("damage", [_empty, _no_fp32, _no_exp_avg, _cut])
def test_a_partial_universal_copy_says_it_can_be_deleted(tmp_path, damage, stage):
    """A conversion is renamed into place whole, so files missing or cut short in ``TAG/universal/`` come from a
    copy or sync: one line that says to delete it (the next resume converts the tag again), for every way it is
    partial, at each stage's fit (ZeRO-3's found nothing missing, and DeepSpeed's loader failed later)."""
    from xpt_ds.checkpoint.universal_stages import fit_for
    whole = _universal(tmp_path / "whole" / "universal")
    assert fit_for(whole, stage) == 0
    folder = _universal(tmp_path / tag_for(4) / "universal")
    damage(folder)
    with pytest.raises(CheckpointError) as info:
        fit_for(folder, stage)
    line = str(info.value)
    assert line.startswith(f"universal checkpoint {folder} is incomplete or damaged (") and "\n" not in line
    assert line.endswith(f"it is the copy xpt-ds made of checkpoint {tag_for(4)} to resume at another scale: "
                         "delete it, and the next resume makes it again")
