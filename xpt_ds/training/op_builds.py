"""What DeepSpeed's JIT build of a CUDA op (FusedAdam's kernel) reads from the environment, checked first.

DeepSpeed 0.19.8 builds FusedAdam for the entries of ``TORCH_CUDA_ARCH_LIST`` and sorts them by reading each
dotted part as a number ('9.0', '9.0+PTX', '8.6 9.0'), so an entry torch itself accepts, like '9.0a' (which some
GPU images set), stops the first optimizer step's build with ``ValueError: invalid literal for int()`` deep in a
traceback. ``check_arch_list`` says so in one line before the build starts. A DeepSpeed with FusedAdam prebuilt
(``DS_BUILD_FUSED_ADAM=1`` at install) imports it and reads no arch list.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping

from xpt_ds.errors import UserError

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
