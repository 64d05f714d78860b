"""torch.profiler over a few training steps of benchmarks/bench_throughput.py's xpt_ds rows (``--profile``)."""
from __future__ import annotations

from pathlib import Path


def synchronize() -> None:
    import deepspeed

    deepspeed.get_accelerator().synchronize()


def profile_steps(step, path: str, device) -> dict:
    """3 steps under torch.profiler: the table of operators and kernels by self device time goes to ``path``;
    returns the top 15 by share of device time and every attention operator or kernel that ran."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    synchronize()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for i in range(3):
            step(i)
        synchronize()
    events = prof.key_averages()
    # On CUDA the shares are of kernel time (events that ran on the device), so an operator and the kernels it
    # launched are not counted twice; on the CPU, of host operator time.
    kernels = [e for e in events if e.device_type == DeviceType.CUDA] if cuda else list(events)

    def own(e) -> float:  # self time on the device (CUDA) or the host (CPU), microseconds
        if not cuda:
            return e.self_cpu_time_total
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(events.table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total",
                                       row_limit=40, max_name_column_width=90))
    total = sum(own(e) for e in kernels) or 1.0
    top = sorted(kernels, key=own, reverse=True)[:15]
    words = ("flash", "fmha", "efficient_attention", "cudnn_attention", "scaled_dot_product", "attention")
    return {"device_ms_per_step": total / 1000 / 3, "top": [{"name": e.key[:140], "share": own(e) / total,
                                                             "calls": e.count} for e in top],
            "attention": sorted({e.key[:140] for e in events if any(w in e.key.lower() for w in words)})}
