"""What a DeepSpeed engine config (a dict: the run's engine JSON, or the one a checkpoint recorded in its model
states) asks for: its ZeRO stage and its precision, and the other settings by which two such configs differ. The
trainer builds its engine by them; a resume compares the checkpoint's with the run's (the stage and the precision in
``xpt_ds.checkpoint.universal``, the rest in ``xpt_ds.checkpoint.tag_checks``)."""
from __future__ import annotations

from xpt_ds.config.values import flatten


def zero_stage(ds: dict) -> int:
    """The ZeRO stage a DeepSpeed config dict asks for (0 when it has no zero_optimization section)."""
    return int((ds.get("zero_optimization") or {}).get("stage", 0))


def precision(ds: dict) -> str:
    """'bf16' (DeepSpeed's ``bf16`` section, or its legacy name ``bfloat16``), 'fp16' or 'fp32': the dtype the
    engine keeps the module in, casting a float32 module to it."""
    if (ds.get("bf16") or ds.get("bfloat16") or {}).get("enabled"):
        return "bf16"
    return "fp16" if (ds.get("fp16") or {}).get("enabled") else "fp32"


# Keys of a checkpoint's recorded engine config that a resume's own engine JSON is not compared on: the trainer
# writes them from its config (xpt_ds.training.engine.build_ds_config), whose changes other lines say
# (xpt_ds.checkpoint.tag_checks: the global batch, optim.grad_clip, optim.torch_adam), or the universal checkpoint's
# line says (the stage and the precision, xpt_ds.checkpoint.universal). ``checkpoint.load_universal`` is the
# trainer's too (xpt_ds.training.engine.build_engine, for a resume at another scale), and every checkpoint of the
# phase it loaded into records it.
SET_BY_THE_TRAINER = {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
                      "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer",
                      "zero_force_ds_cpu_optimizer", "zero_optimization.stage", "bf16.enabled", "bfloat16.enabled",
                      "fp16.enabled", "checkpoint.load_universal"}


def engine_changes(saved: dict, now: dict) -> list[str]:
    """'KEY OLD -> NEW' for each setting (dotted, as ``zero_optimization.offload_optimizer.device``) that the engine
    config a checkpoint recorded (``saved``) and the run's engine JSON (``now``) set otherwise, '(unset)' where one
    of them lacks it; the keys the trainer sets (``SET_BY_THE_TRAINER``) are not compared."""
    old, new = flatten(saved), flatten(now)

    def shown(values: dict, key: str) -> str:
        return repr(values[key]) if key in values else "(unset)"

    return [f"{k} {shown(old, k)} -> {shown(new, k)}" for k in sorted(old.keys() | new.keys())
            if k not in SET_BY_THE_TRAINER and (k in old, old.get(k)) != (k in new, new.get(k))]


# The zero_optimization settings that decide where a stage puts each trained parameter in the flat fp32 and Adam
# partitions its checkpoint holds, with DeepSpeed 0.19's defaults. Its own load copies those partitions by position,
# so under another setting ZeRO-1/2 went on from misplaced weights and moments without a word
# (round_robin_gradients, which xpt_ds.config.engine_support now refuses: a checkpoint saved without it resumed
# with it had a loss of 5.30 after one step where the run had 4.98) or stops at DeepSpeed's check of the paddings
# (parameter_alignment, where they differ), and ZeRO-3 stopped with a traceback (sub_group_size). A universal
# checkpoint is per parameter: through one, both resume exactly.
LAYOUT_KEYS = {1: {"round_robin_gradients": False, "parameter_alignment": False},
               2: {"round_robin_gradients": False, "parameter_alignment": False},
               3: {"sub_group_size": 10**9}}


def layout_changes(saved: dict, now: dict) -> list[str]:
    """'zero_optimization.KEY OLD -> NEW' for each ``LAYOUT_KEYS`` setting of the stage both configs run at that
    the engine config a checkpoint recorded (``saved``) and the run's (``now``) set otherwise."""
    stage = zero_stage(now)
    if zero_stage(saved) != stage:
        return []
    old, new = saved.get("zero_optimization") or {}, now.get("zero_optimization") or {}
    return [f"zero_optimization.{k} {old.get(k, default)!r} -> {new.get(k, default)!r}"
            for k, default in LAYOUT_KEYS.get(stage, {}).items() if old.get(k, default) != new.get(k, default)]
