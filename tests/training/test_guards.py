"""Guards through the real launchers: an injected NaN (on rank 0 only) is skipped by every rank and counted;
repeated ones end in a checkpoint and a clear halt that a resume continues from; at ZeRO stage 0, which cannot
skip a step, the run halts without saving; fp16 loss scaling's overflows are not bad steps. Plus the loss-spike
and slow-step detectors."""
import json
import re

import pytest
import torch

from conftest import REPO, base_config, launch, read_metrics, write_config
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import complete_tags, tag_for
from xpt_ds.training.guards import (HALTED_EXIT_CODE, BadStepCounter, SlowSteps, SpikeDetector, StepGuards,
                                   slow_step_line)


def _cfg(run, tiny_roberta, corpus, ds, every, **guard):
    cfg = base_config(run, tiny_roberta, corpus, deepspeed=str(REPO / f"ds_configs/{ds}.json"),
                      checkpoint={"every_steps": every}, guard=guard)
    cfg["optim"]["torch_adam"] = "bf16" not in ds
    return cfg


def _status(run):
    return json.loads((run / "status.json").read_text())


def _equal(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.multiproc
def test_single_nan_is_skipped_by_every_rank_and_counted(tmp_path, tiny_roberta, corpus):
    run = tmp_path / "run"
    cfg = _cfg(run, tiny_roberta, corpus, "zero2_fp32", every=1, inject_nan_steps=[3])
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step 3: loss or gradient norm not finite, update skipped (1 in a row, 1 in all)" in proc.stderr
    status = _status(run)
    assert (status["state"], status["skipped_steps"], status["global_step"]) == ("finished", 1, 8)
    metrics = read_metrics(run)
    assert metrics[3]["train/loss"] is None and metrics[3]["train/skipped_steps"] == 1
    assert all(isinstance(metrics[s]["train/loss"], float) for s in metrics if s != 3)
    lr = [metrics[s]["train/lr"] for s in (2, 3, 4)]  # phase 1: 4 steps, 1 of warmup, then linear decay
    assert lr[0] > lr[1] == lr[2]  # the skipped step 3 did not advance the schedule, as DeepSpeed's would not
    ckpt = run / "checkpoints"
    w = {s: load_checkpoint_fp32(ckpt, tag_for(s)) for s in (2, 3, 4)}
    assert _equal(w[2], w[3])  # no update at the NaN step, on any rank's partition
    assert not _equal(w[3], w[4])  # and training goes on


@pytest.mark.multiproc
def test_repeated_nans_checkpoint_and_halt_then_resume(tmp_path, tiny_roberta, corpus):
    """bf16 ZeRO-1 with DeepSpeed FusedAdam, the production path."""
    run = tmp_path / "run"
    cfg = _cfg(run, tiny_roberta, corpus, "zero1_bf16", every=3, inject_nan_steps=[4, 5, 6], max_bad_steps=2)
    path = write_config(tmp_path / "c.yaml", cfg)
    proc = launch(["--config", str(path)], nproc=2, launcher="deepspeed")  # its exit code is the ranks'
    assert proc.returncode == HALTED_EXIT_CODE, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: 3 steps in a row had a non-finite loss or gradient norm (more than guard.max_bad_steps=2); "
        f"stopped at step 6 with checkpoint {tag_for(6)}")
    assert "Traceback" not in proc.stderr
    assert sum("error:" in line for line in proc.stderr.splitlines()) == 1  # both ranks halt: said once
    assert _status(run)["state"] == "halted"
    ckpt = run / "checkpoints"
    assert complete_tags(ckpt) == [tag_for(3), tag_for(4), tag_for(6)]  # 4: the end of phase 1
    assert _equal(load_checkpoint_fp32(ckpt, tag_for(3)), load_checkpoint_fp32(ckpt, tag_for(6)))

    proc = launch(["--config", str(path), "--guard.inject_nan_steps=[]"], nproc=2)  # the cause is gone
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(6)}" in proc.stderr
    assert (_status(run)["state"], _status(run)["skipped_steps"]) == ("finished", 3)


def test_nan_at_zero_stage_0_halts_without_saving(tmp_path, tiny_roberta, corpus):
    run = tmp_path / "run"
    cfg = _cfg(run, tiny_roberta, corpus, "zero0_fp32", every=2, inject_nan_steps=[3])
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))])
    assert proc.returncode == HALTED_EXIT_CODE, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: training loss is nan at step 3") and "ZeRO stage 0" in last
    assert last.endswith(f"Newest complete checkpoint: {tag_for(2)}")
    assert complete_tags(run / "checkpoints") == [tag_for(2)]


@pytest.mark.parametrize("ds,why", [("zero0_fp32", "ZeRO stage 0 cannot skip one"),
                                    ("zero1_bf16_lean", "the DeepSpeed JSON's bf16.check_grad_overflow is false")])
def test_no_checkpoint_is_written_from_non_finite_weights_where_no_step_is_skipped(tmp_path, tiny_roberta, corpus,
                                                                                  ds, why):
    """Saving every step and logging every 3rd: the NaN update of step 2 reaches the weights before any log
    step could see the loss. The save checks the weights first and halts instead of writing them. The lean bf16
    engine configs (BENCHMARKS.md: a host sync fewer per step) let such a step through as stage 0 does."""
    run = tmp_path / "run"
    cfg = _cfg(run, tiny_roberta, corpus, ds, every=1, inject_nan_steps=[2])
    cfg["logging"]["log_every"] = 3
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))])
    assert proc.returncode == HALTED_EXIT_CODE, proc.stderr[-3000:]
    assert f"non-finite steps are not skipped ({why})" in proc.stderr  # said at the start
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: weights are not finite at step 2: checkpoint {tag_for(2)} not written"), last
    assert f"went through; {why})" in last
    assert last.endswith(f"Newest complete checkpoint: {tag_for(1)}")
    assert complete_tags(run / "checkpoints") == [tag_for(1)]
    assert all(torch.isfinite(t).all() for t in load_checkpoint_fp32(run / "checkpoints", tag_for(1)).values())
    assert _status(run)["state"] == "halted"


def _fp16_on_this_machine() -> bool:
    import deepspeed
    return bool(deepspeed.get_accelerator().is_fp16_supported())


@pytest.mark.skipif(not _fp16_on_this_machine(), reason="this machine's accelerator has no fp16 (on a CPU: oneDNN "
                                                        "with AVX512-FP16)")
def test_fp16_overflows_find_the_loss_scale_and_only_nan_losses_halt(tmp_path, tiny_roberta, corpus):
    """From 2^24 the first ~10 steps overflow, more in a row than guard.max_bad_steps: logged, not counted, the
    run goes on, and phase 2 starts from the scale phase 1 found. Three NaN losses in a row, on one of the two
    ranks, then halt both (the verdict on a loss is every rank's, as the skip is). The
    resume loads the halt's checkpoint without --allow-pickle (it holds DeepSpeed's DynamicLossScaler) and goes on
    from the scale it saved."""
    run, ds = tmp_path / "run", tmp_path / "fp16.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 1}, "fp16": {"enabled": True, "initial_scale_power": 24}}))
    cfg = _cfg(run, tiny_roberta, corpus, "zero1_fp32", every=0, inject_nan_steps=[20, 21, 22], max_bad_steps=2)
    cfg["deepspeed"] = str(ds)
    cfg["phases"][0]["steps"], cfg["phases"][1]["steps"] = 14, 10
    path = write_config(tmp_path / "c.yaml", cfg)
    proc = launch(["--config", str(path)], nproc=2, launcher="deepspeed")  # the NaNs on rank 0; its exit code
    assert proc.returncode == HALTED_EXIT_CODE, proc.stderr[-3000:]
    overflows = {int(m[1]): float(m[2]) for m in
                 re.finditer(r"step (\d+): fp16 gradients overflowed at loss scale (\S+); update skipped", proc.stderr)}
    first = sorted(s for s in overflows if s <= 14)
    assert first[:6] == [1, 2, 3, 4, 5, 6] and first[-1] < 14, overflows  # more in a row than the limit of 2
    assert overflows[1] == 2.0 ** 24
    metrics = read_metrics(run)
    found = metrics[14]["train/loss_scale"]
    assert found < 2.0 ** 24 and isinstance(metrics[14]["train/loss"], float)
    assert all(scale <= found for step, scale in overflows.items() if step > 14)  # not 2^24 again
    assert metrics[19]["train/skipped_steps"] == 0
    assert "step 20: loss or gradient norm not finite, update skipped (1 in a row, 1 in all)" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: 3 steps in a row had a non-finite loss or gradient norm (more than guard.max_bad_steps=2); "
        "stopped at step 22")
    assert (_status(run)["state"], _status(run)["skipped_steps"]) == ("halted", 3)

    proc = launch(["--config", str(path), "--guard.inject_nan_steps=[]"], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(22)}" in proc.stderr
    assert read_metrics(run)[24]["train/loss_scale"] <= found  # the saved scaler, not 2^24 again
    assert f"overflowed at loss scale {2 ** 24};" not in proc.stderr


@pytest.mark.skipif(not _fp16_on_this_machine(), reason="this machine's accelerator has no fp16")
def test_fp16_overflows_at_the_minimum_scale_are_bad_steps_and_halt_with_a_checkpoint(tmp_path, tiny_roberta,
                                                                                     corpus):
    """A minimum scale at which the gradients still overflow: DeepSpeed would raise a bare Exception there."""
    run, ds = tmp_path / "run", tmp_path / "fp16.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}, "fp16": {
        "enabled": True, "initial_scale_power": 24, "min_loss_scale": 2 ** 22, "hysteresis": 1}}))
    cfg = _cfg(run, tiny_roberta, corpus, "zero2_fp32", every=0, max_bad_steps=2)
    cfg["deepspeed"] = str(ds)
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))])
    assert proc.returncode == HALTED_EXIT_CODE, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "step 2: fp16 gradients overflowed at loss scale 8388608; update skipped" in proc.stderr
    assert "step 3: loss or gradient norm not finite, update skipped (1 in a row, 1 in all)" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: 3 steps in a row had a non-finite loss or gradient norm (more than guard.max_bad_steps=2); "
        f"stopped at step 5 with checkpoint {tag_for(5)}")


def test_an_fp16_scale_overflow_neither_counts_nor_breaks_a_run_of_bad_steps():
    from types import SimpleNamespace
    g = StepGuards(SimpleNamespace(max_bad_steps=1, loss_spike_ratio=0.0, loss_spike_window=4, slow_step_ratio=0.0,
                                   slow_step_window=4, inject_nan_steps=[]), rank=0, world=1, unskipped="")
    assert g.count_bad_step(True, 1) == (False, "step 1: loss or gradient norm not finite, update skipped (1 in a row, "
                                                "1 in all)")
    assert g.count_bad_step(True, 2, 65536.0) == (False, "step 2: fp16 gradients overflowed at loss scale 65536; "
                                                         "update skipped, as dynamic loss scaling does")
    halt, _ = g.count_bad_step(True, 3)
    assert halt and (g.bad_steps.total, g.bad_steps.in_a_row) == (2, 2)


def test_bad_step_counter_halts_only_after_more_than_the_limit_in_a_row():
    c = BadStepCounter(limit=2)
    assert [c.update(s) for s in (True, True, False, True, True)] == [False] * 5
    assert c.update(True) and (c.total, c.in_a_row) == (5, 3)
    d = BadStepCounter(limit=2)
    d.load_state_dict(c.state_dict())
    assert (d.total, d.in_a_row) == (5, 3)


def test_spike_detector_compares_with_the_recent_median():
    d = SpikeDetector(ratio=1.5, window=4, min_history=3)
    assert [d.check(v) for v in (5.0, 4.0, 100.0)] == [None, None, None]  # too little history yet
    assert d.check(6.5) is None  # median(5, 4, 100) = 5: 6.5 < 7.5
    assert d.check(20.0) == 5.75 and d.counted == 4  # median(5, 4, 100, 6.5)
    assert d.check(50.0) == 13.25 and d.counted == 4  # a full window: median(4, 100, 6.5, 20) of 4, not 3
    assert SpikeDetector(ratio=0, window=4, min_history=1).check(1.0) is None


def test_slow_step_line_names_the_rank_that_waited_for_data():
    rows = torch.tensor([[2.0, 0.01], [2.1, 1.9], [2.0, 0.02]], dtype=torch.float64)
    assert slow_step_line(17, rows, 0.5) == ("slow step: step 17 took 2.10 s, 4.2x the median 0.50 s; "
                                             "longest data wait 1.90 s on rank 1")


def _rows(seconds: float, world: int = 2) -> torch.Tensor:
    return torch.tensor([[seconds, 0.0]] * world, dtype=torch.float64)


def test_slow_steps_are_off_on_one_rank_and_rate_limited_on_several():
    one = SlowSteps(ratio=2.0, window=10, world=1)
    assert [one.check(s, _rows(1.0 if s < 10 else 50.0, 1)) for s in range(20)] == [None] * 20
    many = SlowSteps(ratio=2.0, window=10, world=2)
    lines = {s: many.check(s, _rows(1.0 if s < 10 else 50.0)) for s in range(40)}
    reported = sorted(s for s, line in lines.items() if line)
    # every step from 10 on is slow until the window's median catches up (step 15: median of five 1.0 and
    # five 50.0 values is 25.5, and 50 < 2 x 25.5); only the first in each window of 10 steps is reported
    assert reported == [10]
    assert lines[10].startswith("slow step: step 10 took 50.00 s, 50.0x the median 1.00 s")
    again = SlowSteps(ratio=2.0, window=4, world=2)
    out = [again.check(s, _rows(v)) for s, v in enumerate([1.0] * 4 + [9.0, 1.0, 1.0, 9.0, 1.0, 1.0, 9.0, 1.0])]
    assert [s for s, line in enumerate(out) if line] == [4, 10]
    assert "(1 more slow step(s) since the last report)" in out[10]
