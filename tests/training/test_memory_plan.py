"""The memory plan (xpt_ds.training.memory_plan): each phase's model states a rank, against DeepSpeed's own estimate
and against what a run's checkpoint holds; the start-up line; a phase that cannot fit refused before any engine is
built, for a source of 21B parameters whose weight shards are sparse (nothing is read or allocated); and
``xpt-ds train --memory-plan``, which prints the start-up line for any rank count."""
from __future__ import annotations

import json
import math
import re

import pytest
import torch
from conftest import REPO, base_config, launch, one_error_line_of, write_config
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

from xpt_ds.training.memory_plan import GIB, Capacity, memory_problem, node_memory, phase_states

N, W = 8_030_000_000, 8  # Llama-3.1-8B's parameter count on one node of 8


def _ds(stage: int, dtype: str = "bf16", **zero) -> dict:
    return {"zero_optimization": {"stage": stage, **zero}, "bf16": {"enabled": dtype == "bf16"},
            "fp16": {"enabled": dtype == "fp16"}}


def test_zero2_and_zero3_offload_are_deepspeed_s_estimates_less_its_transient_fp32_gradients():
    """DeepSpeed's estimate at ZeRO-2 in bf16, every parameter trained: 2 N + 18 N / W, which counts the fp32
    gradient partition a step makes and drops (4 N / W); the plan leaves that out. Offloaded, where that partition
    stays on the host: ZeRO-2's accelerator holds the weights alone (2 N), and at ZeRO-3 with both offloads a node's
    host the 18 N DeepSpeed counts (before its buffer factor), the accelerator nothing of the model states."""
    _, gpu = estimate_zero2_model_states_mem_needs(N, num_gpus_per_node=W, cpu_offload=False)
    assert phase_states("all", N, N, _ds(2), W).device == pytest.approx(gpu - 4 * N / W, rel=1e-9)
    cpu, gpu, largest = estimate_zero3_model_states_mem_needs(N, 1, num_gpus_per_node=W, additional_buffer_factor=1)
    both = phase_states("all", N, N, _ds(3, offload_optimizer={"device": "cpu"}, offload_param={"device": "cpu"}), W)
    assert both.device == 0 and both.host * W == pytest.approx(cpu, rel=1e-9)
    _, gpu = estimate_zero2_model_states_mem_needs(N, num_gpus_per_node=W, cpu_offload=True)
    offloaded = phase_states("all", N, N, _ds(2, offload_optimizer={"device": "cpu"}), W)
    assert offloaded.device == gpu and offloaded.host * W == 16 * N


@pytest.mark.parametrize("stage, dtype, per_param", [
    (0, "fp32", {"weights": 4, "gradients": 4, "master": 0, "adam": 8}),  # the fp32 weights are the masters
    (0, "bf16", {"weights": 2, "gradients": 2, "master": 4, "adam": 8}),
    (1, "bf16", {"weights": 2, "gradients": 2, "master": 4 / W, "adam": 8 / W}),  # whole gradients at the step's end
    (1, "fp32", {"weights": 4, "gradients": 4, "master": 4 / W, "adam": 8 / W}),  # DeepSpeed clones an fp32 master
    (2, "fp16", {"weights": 2, "gradients": 2 / W, "master": 4 / W, "adam": 8 / W}),
    (3, "bf16", {"weights": 2 / W, "gradients": 2 / W, "master": 4 / W, "adam": 8 / W}),
    (3, "fp32", {"weights": 4 / W, "gradients": 4 / W, "master": 4 / W, "adam": 8 / W})])
def test_every_stage_and_precision_with_every_parameter_trained(stage, dtype, per_param):
    s = phase_states("all", N, N, _ds(stage, dtype), W if stage else 1)  # ZeRO-0: each rank holds it all
    assert s.parts == pytest.approx({k: v * N for k, v in per_param.items()}) and s.host == 0


def test_frozen_parameters_cost_their_weights_only():
    """Phase 1 of XPT at the 8B shape: the 1.05B new parameters (embeddings, ITLs, head) carry gradients, masters
    and moments; the frozen source layers only their bf16 weights."""
    trained = 1_050_000_000
    s = phase_states("phase1", N, trained, _ds(1), W)
    assert s.parts == pytest.approx({"weights": 2 * N, "gradients": 2 * trained, "master": 4 * trained / W,
                                     "adam": 8 * trained / W})


def test_bf16_zero1_with_fp32_gradient_accumulation_holds_fp32_gradients_whole():
    """DeepSpeed's BF16 optimizer (ZeRO-1, bf16, ``data_types.grad_accum_dtype: fp32``) keeps a whole fp32 gradient
    buffer on every rank."""
    ds = {**_ds(1), "data_types": {"grad_accum_dtype": "fp32"}}
    assert phase_states("all", N, N, ds, W).parts["gradients"] == 4 * N


def test_offload_moves_states_to_the_host_by_its_ratio_and_nvme_to_neither():
    half = phase_states("all", N, N, _ds(2, offload_optimizer={"device": "cpu", "ratio": 0.5}), W)
    assert half.parts["adam"] == pytest.approx(4 * N / W) and half.parts["gradients"] == pytest.approx(N / W)
    assert half.host == pytest.approx(8 * N / W)  # half of the masters, moments and fp32 gradient partitions
    nvme = phase_states("all", N, N, _ds(3, offload_optimizer={"device": "nvme"}, offload_param={"device": "nvme"}), W)
    assert nvme.parts == pytest.approx({"weights": 0, "gradients": 0, "master": 0, "adam": 0})
    assert nvme.host == pytest.approx(4 * N / W)  # the fp32 gradient partitions the host steps on


def test_a_phase_that_cannot_fit_is_refused_with_its_figures_and_zero3_s():
    cap = Capacity(40 * GIB, 250 * GIB, "a 40 GiB card (cuda:0) has 40.0 GiB", "a host", on_host=False)
    fits = phase_states("phase1", N, 1_050_000_000, _ds(1), W)
    whole = phase_states("phase2", N, N, _ds(1), W)
    assert memory_problem([fits], _ds(1), W, cap) is None
    assert memory_problem([fits, whole], _ds(1), W, cap) == (
        "phase 'phase2' needs at least 41.1 GiB a rank on its accelerator for its model states alone (weights 15.0 + "
        "gradients 15.0 + fp32 master 3.7 + Adam moments 7.5 GiB; ZeRO-1, bf16, 8 rank(s); 8,030,000,000 of "
        "8,030,000,000 parameters trained), and a 40 GiB card (cuda:0) has 40.0 GiB: it cannot train; at ZeRO-3 they "
        "come to 119.7 GiB over all ranks, at least 3 rank(s) of 40.0 GiB: use ZeRO-3 on more ranks, the optimizer "
        "offloaded (config key 'deepspeed'), or train fewer parameters in that phase (guard.memory_check: false "
        "trains anyway)")
    offloaded = phase_states("all", N, N, _ds(3, offload_optimizer={"device": "cpu"}), W)
    host = Capacity(80 * GIB, 10 * GIB, "a card", "this node has 80.0 GiB of memory, 10.0 GiB for each of its 8 ranks",
                    False)
    assert re.match(r"phase 'all' needs at least 15\.0 GiB a rank of host memory for what it offloads for its model "
                    r"states alone \(weights 1\.9 \+ offloaded to the host 15\.0 GiB; .* and this node has 80\.0 GiB "
                    r"of memory, 10\.0 GiB for each of its 8 ranks: it cannot train",
                    memory_problem([offloaded], _ds(3), W, host))


def test_node_memory_is_the_machine_s_or_its_cgroup_s_limit(tmp_path):
    """A job's cgroup (Slurm's ``--mem``, a container) limits what the node has for it: the lowest limit of the
    process's own cgroup and its parents, in v2 (``memory.max``, "max" for none) and v1 (``memory.limit_in_bytes``,
    a huge number for none), up to the controller's mount, whose own file is a container's limit."""
    import os
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < node_memory() <= machine
    root = tmp_path / "cgroup"
    job = root / "system.slice" / "slurmstepd.scope" / "job_7"
    (job / "step_0").mkdir(parents=True)
    (root / "memory.max").write_text("max\n")
    (job / "memory.max").write_text(f"{5 << 30}\n")
    (job / "step_0" / "memory.max").write_text("max\n")
    (tmp_path / "v2").write_text("0::/system.slice/slurmstepd.scope/job_7/step_0\n")
    assert node_memory(str(tmp_path / "v2"), str(root / "x")) == machine  # no such mount: the machine's
    assert node_memory(str(tmp_path / "v2"), str(root)) == min(machine, 5 << 30)
    (root / "memory.max").write_text(f"{1 << 30}\n")  # a container's (its cgroup namespace's root)
    assert node_memory(str(tmp_path / "v2"), str(root)) == min(machine, 1 << 30)
    v1 = root / "memory" / "slurm" / "uid_0" / "job_7"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{3 << 30}\n")
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "v1").write_text("12:pids:/\n4:memory:/slurm/uid_0/job_7\n1:name=systemd:/\n")
    assert node_memory(str(tmp_path / "v1"), str(root)) == min(machine, 3 << 30)
    assert node_memory(str(tmp_path / "missing"), str(root)) == machine


def test_the_start_up_line_counts_what_the_engine_optimizes(engine_runs):
    """The 2-rank ZeRO-2 fp32 run's line: each phase's trained parameters are the fp32 master values DeepSpeed
    holds in its checkpoint at that phase's end, summed over the ranks' partitions less their padding."""
    run = engine_runs("zero2_fp32")
    err = (run.parent / "stderr.txt").read_text()
    line = next(x for x in err.splitlines() if "memory plan, model states a rank" in x)
    assert "(ZeRO-2, fp32, 2 rank(s)): 'phase1' " in line and "; 'phase2' " in line
    counts = [tuple(int(x.replace(",", "")) for x in m)
              for m in re.findall(r"([\d,]+) of ([\d,]+) parameters trained", line)]
    for (trained, total), tag in zip(counts, ("global_step000000004", "global_step000000008")):
        optim = [torch.load(run / "checkpoints" / tag / f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt",
                            map_location="cpu", weights_only=False)["optimizer_state_dict"] for r in range(2)]
        masters = sum(t.numel() for o in optim for t in o["single_partition_of_fp32_groups"])
        assert trained == masters - sum(sum(o["group_paddings"]) for o in optim)
    assert counts[0][1] == counts[1][1] and counts[0][0] < counts[1][0] == counts[1][1]  # phase 2 trains all


def test_memory_plan_prints_the_start_up_line_for_any_rank_count_without_starting(engine_runs, capsys):
    """``xpt-ds train --memory-plan 2 1``: for 2 ranks, the line the 2-rank run logged at its start (less what its
    ranks had); for 1, the same parameters with the partitions whole; nothing written, no process group."""
    from xpt_ds.cli.train import main
    run = engine_runs("zero2_fp32")
    logged = next(x for x in (run.parent / "stderr.txt").read_text().splitlines() if "memory plan, model" in x)
    logged = logged[logged.index("memory plan"):logged.index("; this node has")]
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert main(["--config", str(run.parent / "cfg.yaml"), "--memory-plan", "2", "1"]) == 0
    two, one = capsys.readouterr().out.splitlines()
    assert two == logged and one.startswith("memory plan, model states a rank before activations (ZeRO-2, fp32, 1 ")
    assert re.findall(r"([\d,]+) of [\d,]+ parameters trained", one) == re.findall(r"([\d,]+) of [\d,]+ param", two)
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    assert main(["--config", str(run.parent / "cfg.yaml"), "--memory-plan", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --memory-plan takes rank counts of 1 or more, got 0"


def _sparse_source(out, tiny_roberta, hidden: int = 8192, layers: int = 24, shard_bytes: int = 4 << 30):
    """A RoBERTa of ``layers`` x ``hidden`` (19.4B parameters, 21B with the ITLs) in the hub's layout of bf16
    safetensors shards of at most ``shard_bytes`` and their index, each shard's every tensor in its header and its
    body sparse: 39 GB on paper, nothing on disk. (One 39 GB file would not do: safetensors maps a file whole, and a
    private mapping larger than this machine's memory is refused.)"""
    from transformers import AutoConfig, AutoModelForMaskedLM

    from xpt_ds.model.skeleton import parameters_on_meta
    config = AutoConfig.from_pretrained(tiny_roberta, hidden_size=hidden, intermediate_size=4 * hidden,
                                        num_hidden_layers=layers, num_attention_heads=64)
    with parameters_on_meta():
        shapes = {n: list(p.shape) for n, p in AutoModelForMaskedLM.from_config(config).state_dict().items()}
    out.mkdir()
    config.save_pretrained(out)
    shards, weight_map = [{}], {}
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        if shards[-1] and sum(b for _, b in shards[-1].values()) + size > shard_bytes:
            shards.append({})
        shards[-1][name] = (shape, size)
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {}, 0
        for name, (shape, size) in shard.items():
            header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
            offset += size
            weight_map[name] = file
        text = json.dumps(header).encode()
        with open(out / file, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text)
            f.truncate(8 + len(text) + offset)
    total = sum(size for shard in shards for _, size in shard.values())
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                  "weight_map": weight_map}))
    return out


def test_a_run_that_cannot_fit_is_refused_before_any_engine_is_built(tmp_path, tiny_roberta, corpus):
    """ZeRO-0 in fp32 on one process: phase 1 holds the 21B weights (78 GiB), phase 2 16 bytes for each parameter
    (313 GiB), which no machine this runs on has. One error line naming the first phase that does not fit, before
    the first engine: no checkpoint, and none of the source's 42 GB read (its shards are sparse)."""
    source = tmp_path / "big"
    _sparse_source(source, tiny_roberta)
    assert sum(f.stat().st_blocks for f in source.glob("*.safetensors")) * 512 < 1 << 20  # under 1 MiB on disk
    cfg = base_config(tmp_path / "run", source, corpus, deepspeed=str(REPO / "ds_configs/zero0_fp32.json"))
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))], nproc=1)
    line = one_error_line_of(proc, "needs at least", "for its model states alone", "ZeRO-0, fp32, 1 rank(s)",
                             "this node has", "at ZeRO-3 they come to",
                             "use ZeRO-3 on more ranks, bf16, the optimizer offloaded")
    refused = re.match(r"error: phase '(phase\d)'", line).group(1)
    plan = next(x for x in proc.stderr.splitlines() if "memory plan, model states a rank" in x)
    needed = {name: float(gib) * GIB for name, gib in re.findall(r"'(phase\d)' ([\d.]+) GiB \(", plan)}
    assert list(needed) == ["phase1", "phase2"] and needed["phase2"] > needed["phase1"] > 70 * GIB
    first = next(name for name, need in needed.items() if need > node_memory())  # the figures are rounded to 0.1
    assert refused == first, (refused, needed, node_memory())
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())
    assert "engine built" not in proc.stderr
