"""Giving freed host memory back: tensors of a megabyte or more, an engine a phase drops, a build's temporaries.

glibc serves an allocation below its mmap threshold from the heap, and raises that threshold (up to 32 MB) each
time a larger block is freed; a freed heap block below a live one stays with the process. A rank that gathers,
converts and frees tensors of tens of MB (building from a source's files, ZeRO-3 gathering layers in a step)
then holds gigabytes no tensor uses: 3B-shaped on 2 CPU ranks under ZeRO-3, a rank grew past 10.8 GiB in its first
step and the job was stopped at 21.5 GiB, where with this it trained at 10.3 GiB a rank (BENCHMARKS.md, "Building
large sources"). ``hold_less_heap`` fixes the threshold at 1 MiB (``mallopt``; a user's ``MALLOC_MMAP_THRESHOLD_``
wins), so such tensors are mapped and unmapped whole. Python frees an engine that reference cycles hold (hooks,
optimizer) only at a collector pass, and a GPU's cache keeps freed device blocks: ``release_freed`` lets both go.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os


M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD = 1 << 20


def _glibc(function: str):
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), function) if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None


_TRIM = _glibc("malloc_trim")


def hold_less_heap() -> bool:
    """Serve every allocation of MMAP_THRESHOLD bytes or more by its own mapping from now on, in this process
    (and the DataLoader workers it forks); False where that cannot be set (not glibc) or the user set it."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    mallopt = _glibc("mallopt")
    return bool(mallopt is not None and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def release_freed() -> None:
    """Collect cyclic garbage now, empty the accelerator's cache, and return the free heap pages to the OS."""
    import deepspeed
    gc.collect()
    deepspeed.get_accelerator().empty_cache()
    if _TRIM is not None:
        _TRIM(0)
