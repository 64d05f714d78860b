"""The optimisations benchmarks/bench_throughput.py tries, one row each (``--variants``, and ``--hf-variants`` for
those that change only the engine JSON), and the engine JSON a row runs."""
from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Optimisations tried on the xpt_ds side, each its own row: what the spec changes. ``compile``: config key
# ``compile`` (xpt_ds.training.compile); ``pad_vocab``: the target vocabulary rounded up to a multiple of that
# many rows; ``grad_clip``: optim.grad_clip; the engine JSON (engine_json): ``ds_file`` names a shipped file
# (ds_configs/<ds_file>.json), else ``ds_base`` picks ds_configs/<ds_base>_<precision>.json (default zero2), and
# each of ``ds``'s top-level sections is merged into the section of that name (None removes it). The rows from
# no_tput_timer on aim at the host work DeepSpeed 0.19.8 does per step, which leaves a phase-2 step on one GPU
# host-bound (BENCHMARKS.md). With ds_configs/zero2_bf16.json
# a step waits for the device six times: its throughput timer (utils/timer.py, on and synchronized by default)
# at the start of forward and the end of step; under overlap_comm at the end of backward (zero/stage_1_and_2.py);
# twice in the bf16 overflow check (has_overflow's .item() after an inf/NaN reduction per gradient, and step's
# test of the norm); once in clipping (unscale_and_clip_grads tests the norm, after a norm kernel per gradient).
# Under ZeRO-2, and ZeRO-1 with overlap_comm or contiguous_gradients, a hook per trainable tensor copies its
# gradient into a bucket. Taking out one wait while others stay may gain nothing (no_overlap did not).
TIMER_OFF = {"throughput": {"enabled": False}}  # the engine's tokens/s timer, which nothing here reads
VARIANTS = {
    "compile": {"compile": True},
    "vocab64": {"pad_vocab": 64},
    "compile+vocab64": {"compile": True, "pad_vocab": 64},
    "no_overlap": {"ds": {"zero_optimization": {"overlap_comm": False}}},
    "buckets_2e8": {"ds": {"zero_optimization": {"reduce_bucket_size": 200_000_000,
                                                 "allgather_bucket_size": 200_000_000}}},
    "no_tput_timer": {"ds": {"timers": TIMER_OFF}},
    # bf16 has fp32's exponent range: without the check a step with a non-finite gradient is taken, not skipped.
    "no_overflow_check": {"ds": {"bf16": {"check_grad_overflow": False}}},
    # The three above together, as shipped (ds_configs/zero2_bf16_lean.json): ZeRO-2, clipping kept, one wait left
    # (clipping's). Non-finite steps are no longer skipped: the trainer halts on one (tests/training/test_guards.py).
    "lean": {"ds_file": "zero2_bf16_lean"},
    # lean without clipping or its norms (compute_grad_norm off needs gradient_clipping 0): no wait left in the
    # step. It trains differently (no clipping): it prices clipping, it is no row to set against HF.
    "nosync": {"ds_file": "zero2_bf16_lean", "grad_clip": 0.0,
               "ds": {"zero_optimization": {"compute_grad_norm": False}}},
    "zero1": {"ds_base": "zero1"},  # ZeRO-1 as shipped; overlap_comm off (DeepSpeed's default below stage 3)
    "zero1_nohooks": {"ds_base": "zero1", "ds": {"zero_optimization": {"contiguous_gradients": False}}},
    # ZeRO-1 without gradient hooks, and lean's other settings, as shipped (ds_configs/zero1_bf16_lean.json): one
    # wait left (clipping's).
    "zero1_lean": {"ds_file": "zero1_bf16_lean"},
    # torch.autocast to bf16 inside the engine's forward instead of a bf16 module: fp32 parameters, fp32 ZeRO-2
    # (no overflow check: DeepSpeed runs it for fp16/bf16 modules only), bf16 matmuls.
    "autocast": {"ds": {"bf16": None, "torch_autocast": {"enabled": True, "dtype": "bfloat16"}}},
    # activations.checkpoint_every: 1 (xpt_ds.model.forward.recompute): every layer recomputed in the backward. The HF
    # row of this variant is TrainingArguments(gradient_checkpointing=True), non-reentrant like it.
    "recompute": {"activations": 1},
    # Decoders (--decoder): FlexAttention with a document BlockMask instead of SDPA on a dense block-diagonal mask
    # (model.attention, xpt_ds.model.forward.document_mask).
    "flex": {"attention": "flex"},
    # flex with every layer and the head compiled (compile: true; xpt_ds.training.compile): the layer around the
    # attention kernel fused too, which issue 54 lists after the document mask.
    "flex+compile": {"attention": "flex", "compile": True},
}
DECODER_ONLY = ("flex", "flex+compile")
# The variants the HF side can run too (--hf-variants): those that change only the engine JSON, which it reads,
# and activation checkpointing, which TrainingArguments has: the peer with the same settings, not only as shipped.
HF_VARIANTS = sorted(v for v, change in VARIANTS.items() if set(change) <= {"ds", "ds_file", "ds_base", "activations"})


def engine_json(spec: dict) -> dict:
    """The engine JSON a row runs: ds_configs/<ds_file>.json or ds_configs/<ds_base>_<precision>.json, with the
    variant's ``ds`` sections merged in (a None section removed)."""
    stem = spec.get("ds_file") or f"{spec.get('ds_base', 'zero2')}_{spec['precision']}"
    ds = json.loads((REPO / f"ds_configs/{stem}.json").read_text())
    for section, value in spec.get("ds", {}).items():
        if value is None:
            ds.pop(section, None)
        elif isinstance(value, dict):
            ds[section] = {**ds.get(section, {}), **value}
        else:
            ds[section] = value
    return ds
