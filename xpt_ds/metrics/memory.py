"""Memory at each log step (``mem/*`` in metrics.jsonl and TensorBoard), in GiB: rank 0's host resident set, now
and at its peak since the process started (its DataLoader workers are processes of their own, not counted), and
on CUDA the peak device memory PyTorch's caching allocator held for tensors (allocated) and from the driver
(reserved) since the previous log step: the peaks are reset after each reading, as torchtitan's
``DeviceMemoryMonitor`` does, so a log step shows its window's peak. The GPU keys are absent on CPU."""
from __future__ import annotations

import resource
import sys

import torch

GIB = float(1 << 30)


def host_rss() -> tuple[int | None, int | None]:
    """(resident bytes now, peak resident bytes) of this process: /proc/self/status's VmRSS and VmHWM; where
    there is no /proc, the peak from getrusage (KiB on Linux, bytes on macOS) and no current figure."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS:", "VmHWM:")))
        return tuple(int(fields[k].split()[0]) * 1024 if k in fields else None for k in ("VmRSS", "VmHWM"))
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return None, peak if sys.platform == "darwin" else peak * 1024


def memory_scalars(device: torch.device) -> dict[str, float]:
    """The ``mem/*`` scalars of this log step; on CUDA, resets the device's peak counters for the next window."""
    rss, peak = host_rss()
    out = {}
    if rss is not None:
        out["mem/host_rss_gib"] = rss / GIB
    if peak is not None:
        out["mem/host_peak_rss_gib"] = peak / GIB
    if device.type == "cuda":
        out["mem/gpu_peak_allocated_gib"] = torch.cuda.max_memory_allocated(device) / GIB
        out["mem/gpu_peak_reserved_gib"] = torch.cuda.max_memory_reserved(device) / GIB
        torch.cuda.reset_peak_memory_stats(device)
    return out
