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
