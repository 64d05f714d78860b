"""The DeepSpeed engine settings xpt-ds refuses, each with one line naming the key and why.

xpt-ds builds every engine on an empty skeleton and fills each parameter's partitions itself
(``xpt_ds.training.fill``), builds a new engine per phase, writes checkpoints through DeepSpeed's default engine and
resumes at another scale through universal checkpoints. Some of DeepSpeed 0.19's settings break one of those
without a word, or stop deep in DeepSpeed with a traceback. Each refusal below was found by training the tests' tiny
model on 2 CPU ranks with the setting and comparing its losses, weights and resumes with the plain engine's
(2026-12-04); the figures in the messages are from those runs.
"""
from __future__ import annotations

from xpt_ds.config.engine_json import precision, zero_stage

QUANTIZED = ("zero_quantized_weights", "zero_quantized_gradients", "zero_quantized_nontrainable_weights")  # ZeRO++
MONITORS = ("tensorboard", "csv_monitor", "wandb", "comet")  # DeepSpeed's own monitors (deepspeed.monitor)


def unsupported(ds: dict, torch_adam: bool, device: str) -> str | None:
    """The first reason the engine JSON ``ds`` cannot train here (a run with ``optim.torch_adam`` on an accelerator
    of kind ``device``: 'cpu', 'cuda', ...), as 'KEY ...; what to do'; None when it can."""
    zero = ds.get("zero_optimization") or {}
    stage = zero_stage(ds)
    offload = zero.get("offload_optimizer") or {}
    checkpoint = ds.get("checkpoint") or {}
    predivide, prescale = ds.get("gradient_predivide_factor", 1.0), ds.get("prescale_gradients", False)
    monitor = next((k for k in MONITORS if isinstance(ds.get(k), dict) and ds[k].get("enabled")), None)
    checks = [
        (zero.get("cpu_offload") and not torch_adam,  # with torch AdamW it trains as offload_optimizer does
         "zero_optimization.cpu_offload is true with optim.torch_adam false; xpt-ds picks DeepSpeed's CPU Adam by "
         "offload_optimizer.device only, and DeepSpeed stopped at FusedAdam with a ZeRORuntimeException after the "
         "model was built: write zero_optimization.offload_optimizer: {device: cpu} instead (the same setting)"),
        ("activation_checkpointing" in ds,
         "activation_checkpointing is set; DeepSpeed's activation checkpointing is for models that call "
         "deepspeed.checkpointing, which xpt-ds's do not (its settings changed nothing): remove it and set "
         "activations.checkpoint_every, xpt-ds's own recompute"),
        (monitor,
         f"{monitor}.enabled is true; DeepSpeed's own monitor writes a second set of logs outside the run directory: "
         "remove it (xpt-ds writes RUN_DIR/tb and RUN_DIR/metrics.jsonl itself; logging.tensorboard)"),
        (stage in (1, 2) and zero.get("round_robin_gradients"),
         "zero_optimization.round_robin_gradients is true; under it ZeRO-1/2 trains otherwise once a parameter's fp32 "
         "master is set through safe_set_full_fp32_param, which is how xpt-ds fills every engine (a loss of 5.22 at "
         "step 2 where the run without it has 5.27): leave it false"),
        (stage == 3 and (zero.get("zero_hpz_partition_size") or 1) > 1,
         f"zero_optimization.zero_hpz_partition_size is {zero.get('zero_hpz_partition_size')}; xpt-ds fills each "
         "ZeRO-3 partition itself, not hpZ's secondary copy (ds_secondary_tensor), which DeepSpeed gathers from: the "
         "run skipped its first "
         "3 steps as non-finite, trained 4% off the plain engine's losses after them, and stopped at the phase "
         "switch: leave it 1 (unset)"),
        (stage >= 1 and precision(ds) != "fp32" and zero.get("load_from_fp32_weights") is False,
         f"zero_optimization.load_from_fp32_weights is false; a resume would take the fp32 masters from the "
         f"{precision(ds)} weights, rounded (a bf16 resume went on 2e-4 off the uninterrupted run's losses): leave "
         "it true (unset)"),
        (stage in (1, 2) and zero.get("elastic_checkpoint"),
         "zero_optimization.elastic_checkpoint is true; its checkpoints are in a layout that a resume without it, "
         "and one at another world size, stopped at with a traceback: leave it false (xpt-ds resumes at another "
         "scale through universal checkpoints)"),
        (stage >= 2 and zero.get("reduce_scatter", True) and (predivide != 1.0 or prescale),
         f"{'prescale_gradients is true' if prescale else f'gradient_predivide_factor is {predivide}'} with "
         f"zero_optimization.reduce_scatter, which is on by default; DeepSpeed 0.19 does not support that at "
         f"ZeRO-{stage} (an AssertionError): set zero_optimization.reduce_scatter to false, or drop the key"),
        ("load_universal" in checkpoint,
         "checkpoint.load_universal is set; xpt-ds sets it itself for a resume at another world size, stage or "
         "precision, and with it set every other resume stopped with an AssertionError: remove it"),
        ("writer" in checkpoint,
         "checkpoint.writer is set; xpt-ds writes checkpoints through DeepSpeed's default engine and reads them "
         "memory-mapped, and with a writer the engine build stopped with a KeyError: remove it"),
        ((ds.get("tensor_parallel") or {}).get("autotp_size", 1) > 1,
         "tensor_parallel.autotp_size is above 1; xpt-ds trains data-parallel (ZeRO) only and fills whole "
         "parameters: remove it"),
        (ds.get("sequence_parallel_size", 1) > 1,
         "sequence_parallel_size is above 1; xpt-ds trains data-parallel (ZeRO) only: remove it"),
        (offload.get("ratio", 1.0) < 1.0 and torch_adam,
         f"zero_optimization.offload_optimizer.ratio is {offload.get('ratio')}; a partial offload steps with "
         "DeepSpeed's CPU Adam: set optim.torch_adam to false, or the ratio to 1"),
        (offload.get("super_offload") and device != "cuda",
         f"zero_optimization.offload_optimizer.super_offload is true; SuperOffload runs on NVIDIA CUDA GPUs only, "
         f"and this machine's accelerator is {device}: remove it"),
        (stage == 3 and device == "cpu" and any(zero.get(k) for k in QUANTIZED),
         f"{', '.join(f'zero_optimization.{k}' for k in QUANTIZED if zero.get(k))}: ZeRO++'s quantised "
         "communication has no CPU kernels (a ValueError in the first step): remove it on a CPU"),
    ]
    return next((why for bad, why in checks if bad), None)
