"""``profile.*`` (xpt_ds.metrics.profiler) without a trainer: which steps each profile records, the files it
writes and their contents, a resume or a stop inside a profile, a rank that does not profile, and the config's
checks. The real torch.profiler runs over a small matmul per step, marked with the trainer's parts. The same with the
trainer, on two ranks, is tests/metrics/test_profiler_run.py."""
import gzip
import json
import logging
import re

import pytest
import torch

from xpt_ds.config import ConfigError, PhaseConfig, ProfileConfig, TrainConfig
from xpt_ds.config.validate import problems
from xpt_ds.metrics.profiler import StepProfiler, breakdown, check_ranks, format_breakdown, part

CPU = torch.device("cpu")


def run_steps(prof: StepProfiler, steps, stop_after: int | None = None) -> None:
    """A training loop's calls: ``begin``, the step's marked parts, ``end``; ``close`` at the end (or after step
    ``stop_after``, as a preempted run)."""
    x = torch.randn(64, 64, requires_grad=True)
    for step in steps:
        prof.begin(step)
        with part("forward"):
            y = (x @ x).tanh().sum()
        with part("backward"):
            y.backward()
        prof.end(step)
        if step == stop_after:
            break
    prof.close()


def profiles(run_dir) -> dict[str, list[str]]:
    root = run_dir / "profile"
    return {d.name: sorted(f.name for f in d.iterdir()) for d in sorted(root.iterdir())} if root.exists() else {}


def steps_in(trace) -> list[str]:
    events = json.load(gzip.open(trace))["traceEvents"]
    return sorted({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


def test_profiles_every_n_steps_and_writes_a_trace_and_a_table(tmp_path, caplog):
    cfg = ProfileConfig(start_step=3, steps=2, warmup=1, every=4)  # 3-4, 7-8; 11-12 ends past step 11: not started
    prof = StepProfiler(cfg, tmp_path, 0, 1, CPU, last_step=11)
    assert prof.plan() == (f"profile: steps 3-4, then every 4 steps to step 11, after 1 warmup step, on rank 0 "
                           f"(into {tmp_path / 'profile'})")
    with caplog.at_level(logging.INFO, logger="xpt_ds.metrics.profiler"):
        run_steps(prof, range(1, 12))
    files = ["rank0.pt.trace.json.gz", "rank0.txt"]
    assert profiles(tmp_path) == {"steps_3-4": files, "steps_7-8": files}
    assert steps_in(tmp_path / "profile/steps_7-8/rank0.pt.trace.json.gz") == ["ProfilerStep#1", "ProfilerStep#2"]
    table = (tmp_path / "profile/steps_7-8/rank0.txt").read_text()
    assert "global steps 7-8 (2 recorded after 1 warmup), rank 0 of 1" in table
    assert "ProfilerStep#k is global step 6 + k" in table
    assert "aten::mm" in table and "Self CPU" in table
    breakdown = next(ln for ln in table.splitlines() if ln.startswith("Where a step's host time goes"))
    assert re.search(r"ms a step: step [\d.]+ = forward [\d.]+ \+ backward [\d.]+( \+ other [\d.]+)?$", breakdown)
    said = [r.getMessage() for r in caplog.records]
    assert [m.split(" written")[0] for m in said] == ["profile of steps 3-4", "profile of steps 7-8"]
    assert "(rank 0); rank 0's step, host ms: step " in said[1]


def test_no_warmup_and_a_profile_from_the_first_step(tmp_path):
    prof = StepProfiler(ProfileConfig(start_step=1, steps=1, warmup=0), tmp_path, 0, 1, CPU, last_step=3)
    with pytest.warns(UserWarning, match="warmup"):  # torch.profiler's own: the first step carries its start-up
        run_steps(prof, range(1, 4))
    assert list(profiles(tmp_path)) == ["steps_1-1"]
    assert steps_in(tmp_path / "profile/steps_1-1/rank0.pt.trace.json.gz") == ["ProfilerStep#0"]


def test_shapes_and_memory_when_asked(tmp_path):
    cfg = ProfileConfig(start_step=2, steps=1, record_shapes=True, memory=True)
    run_steps(StepProfiler(cfg, tmp_path, 0, 1, CPU, last_step=2), range(1, 3))
    table = (tmp_path / "profile/steps_2-2/rank0.txt").read_text()
    assert "Input Shapes" in table and "[[64, 64], [64, 64]]" in table and "CPU Mem" in table


def test_a_resume_inside_a_profile_skips_it_and_takes_the_next(tmp_path, caplog):
    cfg = ProfileConfig(start_step=4, steps=2, warmup=2, every=6)  # warmup 2-3 / 8-9, records 4-5 / 10-11
    prof = StepProfiler(cfg, tmp_path, 0, 1, CPU, last_step=12)
    with caplog.at_level(logging.INFO, logger="xpt_ds.metrics.profiler"):
        run_steps(prof, range(3, 13))  # resumed from a checkpoint at step 2: inside the first one's warmup
    assert list(profiles(tmp_path)) == ["steps_10-11"]
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == "profile of steps 4-5 not taken: this attempt starts at step 3, inside it (profile.warmup=2)"


def test_a_run_that_stops_inside_a_profile_writes_none_of_it(tmp_path, caplog):
    prof = StepProfiler(ProfileConfig(start_step=3, steps=3), tmp_path, 0, 1, CPU, last_step=8)
    with caplog.at_level(logging.INFO, logger="xpt_ds.metrics.profiler"):
        run_steps(prof, range(1, 9), stop_after=4)
    assert profiles(tmp_path) == {}
    assert [r.getMessage() for r in caplog.records] == [
        "profile of steps 3-5 not written: the run stopped inside it"]


def test_a_rank_not_listed_records_nothing_and_rank_0_names_the_ones_that_do(tmp_path, caplog):
    cfg = ProfileConfig(start_step=2, steps=1, ranks=[1, 3])
    with caplog.at_level(logging.INFO, logger="xpt_ds.metrics.profiler"):
        run_steps(StepProfiler(cfg, tmp_path, 0, 4, CPU, last_step=3), range(1, 4))
        assert profiles(tmp_path) == {}
        run_steps(StepProfiler(cfg, tmp_path, 3, 4, CPU, last_step=3), range(1, 4))
    assert profiles(tmp_path) == {"steps_2-2": ["rank3.pt.trace.json.gz", "rank3.txt"]}
    assert [r.getMessage() for r in caplog.records] == [
        f"profile of steps 2-2: ranks 1, 3 into {tmp_path / 'profile/steps_2-2'}"]
    check_ranks(cfg, 4)
    with pytest.raises(ConfigError, match=r"^config key 'profile.ranks' names rank 3, but this job has 2 ranks "
                                          r"\(0-1\)$"):
        check_ranks(cfg, 2)


def test_a_trace_that_cannot_be_written_is_said_and_the_run_goes_on(tmp_path, caplog):
    (tmp_path / "profile").write_text("a file where the folder goes")
    with caplog.at_level(logging.INFO, logger="xpt_ds.metrics.profiler"):
        run_steps(StepProfiler(ProfileConfig(start_step=2, steps=1), tmp_path, 0, 1, CPU, last_step=3), range(1, 4))
    assert len(caplog.records) == 1  # the warning alone: no line that says where the files went
    assert caplog.records[0].getMessage().startswith("profile of steps 2-2 not written on rank 0: ")


@pytest.mark.parametrize("settings, line", [
    ({"steps": 5}, "config key 'profile.steps' is set but profile.start_step is 0 (off; set the first step to "
                   "profile)"),
    ({"start_step": -1}, "config key 'profile.start_step' must be >= 0 (0 = off), got -1"),
    ({"start_step": 1}, "config key 'profile.start_step' is 1, which leaves no room before it for its "
                        "profile.warmup=1 (global steps count from 1): start at step 2 or later"),
    ({"start_step": 3, "steps": 0}, "config key 'profile.steps' must be >= 1, got 0"),
    ({"start_step": 3, "warmup": -1}, "config key 'profile.warmup' must be >= 0, got -1"),
    ({"start_step": 2, "steps": 2, "every": 2}, "config key 'profile.every' must be 0 (once) or at least "
                                                "profile.warmup + profile.steps = 3 (one profile at a time), got 2"),
    ({"start_step": 7, "steps": 3}, "config key 'profile.start_step': its profile of steps 7-9 ends past the run's "
                                    "last step 8 (the phases' steps)"),
    ({"start_step": 3, "ranks": [0, 0]}, "config key 'profile.ranks' must list distinct global ranks >= 0, got "
                                         "[0, 0]"),
    ({"start_step": 3, "ranks": []}, "config key 'profile.ranks' must list distinct global ranks >= 0, got []"),
])
def test_config_checks(settings, line):
    cfg = TrainConfig(phases=[PhaseConfig(name="a", steps=4), PhaseConfig(name="b", steps=4)])
    for key, value in settings.items():
        setattr(cfg.profile, key, value)
    assert [p for p in problems(cfg) if "profile" in p] == [line]
    cfg.profile = ProfileConfig(start_step=2, steps=2, every=3, ranks=[0, 5])
    assert not [p for p in problems(cfg) if "profile" in p]


def test_the_breakdown_counts_the_kernels_not_the_spans_on_the_device():
    """On CUDA, kineto also gives each record_function span (ProfilerStep#k, xpt.*) a device-side twin whose self
    time covers the kernels inside it: counted, the device would be busier than the step. Events as key_averages
    gives them, in microseconds over 2 steps."""
    from types import SimpleNamespace as E
    CUDA = torch.autograd.DeviceType.CUDA
    host = torch.autograd.DeviceType.CPU
    averages = [E(key="ProfilerStep*", cpu_time_total=20000.0, device_type=host, self_device_time_total=0.0),
                E(key="xpt.forward", cpu_time_total=6000.0, device_type=host, self_device_time_total=0.0),
                E(key="xpt.backward", cpu_time_total=10000.0, device_type=host, self_device_time_total=0.0),
                E(key="ProfilerStep*", cpu_time_total=0.0, device_type=CUDA, self_device_time_total=19000.0,
                  is_user_annotation=True),
                E(key="xpt.forward", cpu_time_total=0.0, device_type=CUDA, self_device_time_total=5000.0,
                  is_user_annotation=True),
                E(key="sm90_gemm", cpu_time_total=0.0, device_type=CUDA, self_device_time_total=12000.0,
                  is_user_annotation=False),
                E(key="aten::mm", cpu_time_total=3000.0, device_type=host, self_device_time_total=0.0)]
    summary = breakdown(averages, 2)
    assert summary == {"step": 10.0, "forward": 3.0, "backward": 5.0, "other": 2.0, "device_busy": 6.0}
    assert format_breakdown(summary) == ("step 10.0 = forward 3.0 + backward 5.0 + other 2.0; the device ran "
                                         "kernels 6.0 ms a step (60%)")
