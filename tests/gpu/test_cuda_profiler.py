"""profile.* on one GPU (xpt_ds.metrics.profiler): the profiler records the device too, its trace holds the kernels,
its table ranks the operators by self device time, and the breakdown gives the device's busy time a step. Skipped
without CUDA (tests/metrics/test_profiler.py is the CPU's)."""
from __future__ import annotations

import gzip
import json

import pytest
import torch

from xpt_ds.config import ProfileConfig
from xpt_ds.metrics.profiler import StepProfiler, part

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_a_cuda_profile_records_the_kernels_and_ranks_by_device_time(tmp_path):
    device = torch.device("cuda", torch.cuda.current_device())
    prof = StepProfiler(ProfileConfig(start_step=2, steps=2), tmp_path, 0, 1, device, last_step=4)
    x = torch.randn(2048, 2048, device=device, requires_grad=True)
    for step in range(1, 5):
        prof.begin(step)
        with part("forward"):
            y = (x @ x).relu().sum()
        with part("backward"):
            y.backward()
        with part("log"):
            y.item()  # the host waits for the kernels here
        prof.end(step)
    prof.close()
    out = tmp_path / "profile/steps_2-3"
    events = json.load(gzip.open(out / "rank0.pt.trace.json.gz"))["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in events)
    table = (out / "rank0.txt").read_text()
    assert "Operators by self device time" in table and "Self CUDA" in table
    summary = prof.summary  # the kernels' own time a step, not the ProfilerStep or xpt.* spans on the device
    assert summary["log"] > 0 and 0 < summary["device_busy"] < summary["step"], summary
    assert "; the device ran kernels " in table
