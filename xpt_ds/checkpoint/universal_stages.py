"""One universal checkpoint for ZeRO-1/2 and ZeRO-3: a resume that changes the stage, as well as the world size.

DeepSpeed's ``ds_to_universal`` writes one folder per parameter whatever the stage it reads, but each stage's
loader reads its own dialect of that layout (DeepSpeed 0.19, ``runtime/base_optimizer.py`` and
``runtime/zero/stage3.py``):

- the engine takes its client state from ``mp_rank_00_model_states.pt`` at ZeRO-1/2 and from
  ``zero_pp_rank_0_mp_rank_00_model_states.pt`` at ZeRO-3; the conversion copies only the saving stage's files;
- ZeRO-1/2 reads each state file of a parameter (``fp32``, ``exp_avg``, ``exp_avg_sq``) as ``{"param": tensor}``
  of the parameter's shape, its Adam step from a ``step.pt`` beside them, and ``ds_version`` from
  ``zero/optimizer_state.pt``; the conversion of a ZeRO-3 checkpoint writes flat tensors, no ``step.pt`` and no
  version;
- ZeRO-3 reads the step from ``zero/optimizer_state.pt``'s ``optimizer_state_dict``, which the conversion of a
  ZeRO-1/2 checkpoint does not write; it reads either form of the state files. The conversion of a ZeRO-3
  checkpoint puts rank 0's whole optimizer file there, which every rank then reads whole: it is slimmed to what the
  loaders read.

``fit_for`` adds what the resuming stage reads and the conversion left out. Every file is written whole under a
temporary name and renamed into place, and a parameter's ``step.pt`` after its state files, so a fit that was
interrupted is completed by the next one; a folder that already fits is left as it is.
"""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import torch

from xpt_ds.checkpoint.tags import CheckpointError
from xpt_ds.errors import UserError, error_line, first_line
from xpt_ds.io.trust import load_plain

FULL_BELOW = 1 << 20  # bytes free under which a write that failed is taken for a full disk
OUT_OF_SPACE = ("no space left on device", "disk quota exceeded", "unexpected pos")  # the last: torch.save's
# zip writer reporting a short write ('[enforce fail at inline_container.cc] . unexpected pos N vs M'), no errno


def out_of_space(folder: Path, said: str = "", e: BaseException | None = None) -> bool:
    """Whether a write under ``folder`` that failed (its exception ``e``, or a process's output ``said``) ran out of
    space: ENOSPC or EDQUOT, torch.save's words for a short write, or the filesystem with under ``FULL_BELOW`` free
    (read before what the write left is removed)."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = f"{said}\n{e if e is not None else ''}".lower()
    return any(k in text for k in OUT_OF_SPACE) or free_bytes(folder) < FULL_BELOW


def free_bytes(folder: Path) -> int:
    """Free bytes of the filesystem that holds ``folder`` (or its nearest existing parent)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 1 << 62  # unknown: not taken for full


def disk_full(folder: Path, state_bytes: int = 0, fitting: bool = False, before: bool = False) -> CheckpointError:
    """The error for the universal copy ``folder`` of checkpoint ``folder.parent`` that its disk has no room for:
    the conversion found too little space ``before`` it started, or ran out while writing (``state_bytes``: the
    checkpoint's optimizer state), or ``fitting`` it (the conversion was complete; the next fit finishes it)."""
    free = f"{free_bytes(folder) / 2**20:,.1f} MiB free"
    size = (f"; the copy takes about 1.5 times the checkpoint's {state_bytes / 2**20:,.1f} MiB of optimizer state"
            if state_bytes else "")
    if before:
        what = f"has {free}, too little for its universal copy ({folder.name}/){size}"
    else:
        what = f"is full: writing its universal copy ({folder.name}/) ran out of space ({free} now){size}"
    kept = "the copy is complete and the next resume finishes fitting it" if fitting else "nothing of it was kept"
    return CheckpointError(f"the disk holding checkpoint {folder.parent} {what}; {kept}: free space there and run "
                           "the same command, or resume at the world size and ZeRO stage the checkpoint was saved at")


MODEL_STATES = {12: "mp_rank_00_model_states.pt", 3: "zero_pp_rank_0_mp_rank_00_model_states.pt"}
STATES = ("fp32", "exp_avg", "exp_avg_sq")


def fit_for(folder: Path, stage: int) -> int:
    """Make the universal checkpoint ``folder`` loadable by an engine at ZeRO ``stage`` (1, 2 or 3); returns the
    number of parameters whose state files it rewrote. A conversion is renamed into place whole, so a folder with
    files missing or cut short is a copy or sync of the run gone wrong: one line that says to delete it (the next
    resume converts the checkpoint again), not a traceback from deep in the fit or in DeepSpeed's loader."""
    try:
        return _fit(folder, stage)
    except UserError:  # said already (a missing file named, a file that would run code refused)
        raise
    except (FileNotFoundError, ValueError, RuntimeError, EOFError, KeyError, IndexError) as e:
        why = error_line(e) if isinstance(e, OSError) else first_line(e).split(". ")[0][:160]
        raise _damaged(folder, f"{type(e).__name__}: {why}" if isinstance(e, LookupError) else why) from None


def _damaged(folder: Path, why: str) -> CheckpointError:
    return CheckpointError(f"universal checkpoint {folder} is incomplete or damaged ({why}); it is the copy xpt-ds "
                           f"made of checkpoint {folder.parent.name} to resume at another scale: delete it, and the "
                           "next resume makes it again")


def _fit(folder: Path, stage: int) -> int:
    family = 3 if stage == 3 else 12
    states = _model_states(folder, family)
    _check_parameters(folder, states)
    optim_file = folder / "zero" / "optimizer_state.pt"
    optim = load_plain(optim_file, mmap=True)
    if not _slim(optim):
        optim = _slimmed(optim, folder, states)
        _save(optim, optim_file)
    if family == 3:
        return 0
    missing = sorted(p.parent for p in (folder / "zero").glob("*/exp_avg.pt") if not (p.parent / "step.pt").exists())
    if not missing:
        return 0
    shapes = _shapes(states)
    if not optim["optimizer_state_dict"]["state"]:
        raise _damaged(folder, "no parameter's step.pt, and no Adam step in zero/optimizer_state.pt")
    step = optim["optimizer_state_dict"]["state"][0]["step"]
    for param in missing:
        for key in STATES:
            value = load_plain(param / f"{key}.pt")
            if torch.is_tensor(value):  # ZeRO-3's flat tensor
                _save({"param": value.view(shapes[param.name])}, param / f"{key}.pt")
        _save(step, param / "step.pt")
    return len(missing)


def _slim(optim: dict) -> bool:
    inner = optim.get("optimizer_state_dict")
    return (inner is not None and all(set(state) == {"step"} for state in inner["state"].values())
            and "ds_version" in optim and "fp32_flat_groups" not in optim)


def _slimmed(optim: dict, folder: Path, states: Path) -> dict:
    """``zero/optimizer_state.pt`` as both stages read it: the loss scaler, clipping, version and param groups, and
    the Adam step in ``optimizer_state_dict``. Converted from ZeRO-3 it also held rank 0's whole partition of the
    fp32 weights and Adam moments (``fp32_flat_groups``, ``optimizer_state_dict.state``), which every rank's
    engine read whole and no loader uses (each parameter's own files hold them): dropped."""
    inner = optim.get("optimizer_state_dict")
    step = inner["state"][0]["step"] if inner is not None and inner["state"] else _saved_step(folder)
    slim = {k: v for k, v in optim.items() if k not in ("fp32_flat_groups", "optimizer_state_dict")}
    slim["optimizer_state_dict"] = {"state": {} if step is None else {0: {"step": step}},
                                    "param_groups": optim["param_groups"]}
    if "ds_version" not in slim:  # converted from ZeRO-3
        slim["ds_version"] = load_plain(states, mmap=True)["ds_version"]
    return slim


def _model_states(folder: Path, family: int) -> Path:
    """The model-states file the ``family``'s engine reads, linked to (or copied from) the other one's."""
    want = folder / MODEL_STATES[family]
    if not want.exists():
        have = folder / MODEL_STATES[12 if family == 3 else 3]
        if not have.exists():
            raise _damaged(folder, f"no model-states file, {want.name} or {have.name}")
        try:
            os.link(have, want)
        except OSError:  # a filesystem without hard links
            tmp = want.with_name(want.name + ".tmp")
            try:
                shutil.copyfile(have, tmp)
            except OSError as e:
                tmp.unlink(missing_ok=True)
                if out_of_space(folder, e=e):
                    raise disk_full(folder, fitting=True) from None
                raise
            os.replace(tmp, want)
    return want


def _check_parameters(folder: Path, states: Path) -> None:
    """Every trained parameter the model-states file names (``param_shapes``) has its folder's ``fp32.pt``, and its
    ``exp_avg.pt`` and ``exp_avg_sq.pt`` where any parameter has them (an optimizer that stepped: both loaders read
    them for every parameter, ZeRO-1/2's with a traceback where one is missing)."""
    names = [name for group in load_plain(states, mmap=True)["param_shapes"] for name in group]
    for key in STATES:
        missing = [name for name in names if not (folder / "zero" / name / f"{key}.pt").is_file()]
        if missing and (key == "fp32" or len(missing) < len(names)):
            raise _damaged(folder, f"zero/{missing[0]}/{key}.pt missing, {len(missing)} of {len(names)} "
                                   "parameters' files")


def _saved_step(folder: Path):
    """The Adam step of the parameters a ZeRO-1/2 checkpoint trained (each one's ``step.pt``; all equal); None where
    no parameter has one (an optimizer without Adam state: nothing for either stage to load)."""
    found = next((folder / "zero").glob("*/step.pt"), None)
    return None if found is None else load_plain(found)


def _shapes(states: Path) -> dict:
    """Parameter name -> shape, from a ZeRO-3 model-states file's ``param_shapes`` (one dict per param group)."""
    shapes = {}
    for group in load_plain(states, mmap=True)["param_shapes"]:
        shapes.update(group)
    return shapes


def _save(value, path: Path) -> None:
    """``value`` written whole under a temporary name, then renamed to ``path``; a write the disk has no room
    for leaves nothing behind and is named as such (``disk_full``: its folder is the universal checkpoint's)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(value, tmp)
    except (OSError, RuntimeError) as e:
        full = out_of_space(path.parent, e=e)
        tmp.unlink(missing_ok=True)
        if full:
            raise disk_full(_universal_folder(path), fitting=True) from None
        raise
    os.replace(tmp, path)


def _universal_folder(path: Path) -> Path:
    """The universal checkpoint folder (``TAG/universal``) a file of it is in."""
    return next((p for p in path.parents if p.name in ("universal", "universal.tmp")), path.parent)
