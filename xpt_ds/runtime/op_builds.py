"""What DeepSpeed's JIT build of an op (FusedAdam's kernel, the CPU all-reduce) needs, checked before it starts.

DeepSpeed 0.19.8 builds FusedAdam for the entries of ``TORCH_CUDA_ARCH_LIST`` and sorts them by reading each
dotted part as a number ('9.0', '9.0+PTX', '8.6 9.0'), so an entry torch itself accepts, like '9.0a' (which some
GPU images set), stops the first optimizer step's build with ``ValueError: invalid literal for int()`` deep in a
traceback. ``check_arch_list`` says so in one line before the build starts. A DeepSpeed with FusedAdam prebuilt
(``DS_BUILD_FUSED_ADAM=1`` at install) imports it and reads no arch list.

Every JIT load, built or not, first takes torch's build lock, ``{extensions root}/{op}/lock``, a file that only
the build's own process removes: a job killed while it built the op (a preemption, ``scancel``, a rank's kill -9
during a first run on a fresh node) leaves it, and every later run that loads the op waits on it forever, silently
(torch's ``FileBaton.wait`` has no timeout). ``check_build_lock`` stops such a run with one line naming the file
to delete, when the lock and everything else in its folder are older than ``STALE_LOCK_S``; a younger lock is a
build under way (or, for a moment, another process's up-to-date check: the rank says it waits only when the lock
outlives ``QUIET_WAIT_S``).
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

from xpt_ds.errors import UserError, say

STALE_LOCK_S = 600  # a build of FusedAdam takes 1-3 min and writes its objects as it goes
QUIET_WAIT_S = 3.0  # a lock held longer than this is a build: say so
_ENTRY = re.compile(r"\d+(\+[^.]*)?(\.\d+(\+[^.]*)?)*")  # what int(part.split('+')[0]) takes for every '.' part
_SUFFIXED = re.compile(r"(\d+\.\d+)[a-z]*")  # '9.0a', '10.0f': group 1 is what DeepSpeed reads


def _entries(value: str) -> list[str]:
    """A ``TORCH_CUDA_ARCH_LIST`` value's entries (';' or whitespace between them), as DeepSpeed splits it."""
    return [cc.strip() for cc in value.replace(" ", ";").split(";") if cc.strip()]


def arch_list_problem(value: str) -> str | None:
    """What DeepSpeed cannot read in a ``TORCH_CUDA_ARCH_LIST`` value, or None. An empty value is fine: DeepSpeed
    then asks the visible GPUs."""
    bad = [cc for cc in _entries(value) if not _ENTRY.fullmatch(cc)]
    if bad:
        return (f"DeepSpeed cannot build FusedAdam for {', '.join(map(repr, bad))} (it reads each entry as numbers, "
                "like '9.0' or '9.0+PTX')")
    if value.strip() and not _entries(value):
        return "it names no architecture, and DeepSpeed's FusedAdam build fails on an empty list it was given"
    return None


def check_arch_list(environ: Mapping[str, str] = os.environ) -> None:
    """Raise one line naming what is wrong with ``TORCH_CUDA_ARCH_LIST``, and the fix: the same list with each
    '9.0a'-like entry as '9.0' (the same GPUs, without the architecture-specific features) where every entry
    reads so, else the GPU's capability."""
    value = environ.get("TORCH_CUDA_ARCH_LIST", "")
    problem = arch_list_problem(value)
    if problem:
        plain = [cc if _ENTRY.fullmatch(cc) else (m.group(1) if (m := _SUFFIXED.fullmatch(cc)) else None)
                 for cc in _entries(value)]
        fix = ("TORCH_CUDA_ARCH_LIST='" + " ".join(plain) + "'" if plain and all(plain)
               else "the GPU's capability, e.g. TORCH_CUDA_ARCH_LIST=9.0")
        raise UserError(f"TORCH_CUDA_ARCH_LIST={value!r}: {problem}; set {fix} (or unset it), or optim.torch_adam: "
                        "true")


def fused_adam_is_jit_built() -> bool:
    """Whether constructing FusedAdam here makes DeepSpeed JIT-build its CUDA kernel (which reads the arch list)."""
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import installed_ops
    return get_accelerator().device_name() == "cuda" and not installed_ops.get("fused_adam", False)


def lock_problem(lock: Path, op: str, now: float | None = None) -> str | None:
    """Why ``lock`` (torch's build lock of DeepSpeed's ``op``) would hold a run forever, or None: it and every other
    file in its folder (ninja writes the objects and its log as the build goes) are older than ``STALE_LOCK_S``."""
    now = time.time() if now is None else now
    try:
        made = lock.stat().st_mtime
        newest = max([made, *(entry.stat().st_mtime for entry in lock.parent.iterdir())])
    except FileNotFoundError:  # the build ended and removed it (or a file beside it) meanwhile
        return None
    if now - newest <= STALE_LOCK_S:
        return None
    return (f"{lock} is {(now - made) / 60:.0f} min old and nothing beside it changed for "
            f"{(now - newest) / 60:.0f} min: a build of DeepSpeed's {op} op was killed mid-way (a preempted or killed "
            "job), and every run that loads the op would wait on it forever; delete it (rm "
            f"'{lock}') unless a process is building {op} now")


def jit_lock(builder_name: str) -> tuple[Path, str] | None:
    """(torch's build lock, op name) of the accelerator's ``builder_name`` (``FusedAdamBuilder``) when loading it
    here goes through torch's JIT loader (not prebuilt, not loaded in this process yet), else None."""
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder.builder import OpBuilder
    from torch.utils import cpp_extension
    builder = get_accelerator().create_op_builder(builder_name)
    if builder is None or builder.name in OpBuilder._loaded_ops or installed_ops.get(builder.name, False):
        return None
    directory = getattr(cpp_extension, "_get_build_directory", None)  # torch's own folder rule (private)
    if directory is None:
        return None
    return Path(directory(builder.name, verbose=False)) / "lock", builder.name


def check_build_lock(builder_name: str) -> None:
    """Raise one line when a stale build lock would hold the load of ``builder_name``'s op forever; say (local rank
    0) that the ranks wait when another process is building it."""
    found = jit_lock(builder_name)
    if found is None or not found[0].exists():
        return
    problem = lock_problem(*found)
    if problem:
        raise UserError(problem)
    deadline = time.monotonic() + QUIET_WAIT_S  # every load takes the lock for a moment, built or not: another
    while found[0].exists() and time.monotonic() < deadline:  # rank's up-to-date check is no build to speak of
        time.sleep(0.05)
    from xpt_ds.runtime.rank_say import local_rank
    if found[0].exists() and local_rank() == 0:  # one line per machine; the other ranks wait for the same build
        say(f"waiting for {found[0]}: another process is building DeepSpeed's {found[1]} op (a first run with "
            "this extensions folder; it takes a minute or two)")
