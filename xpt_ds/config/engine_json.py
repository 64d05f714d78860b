"""What a DeepSpeed engine config (a dict: the run's engine JSON, or the one a checkpoint recorded in its model
states) asks for: its ZeRO stage and its precision. The trainer builds its engine by them; a resume compares the
checkpoint's with the run's (``xpt_ds.checkpoint.universal``)."""
from __future__ import annotations


def zero_stage(ds: dict) -> int:
    """The ZeRO stage a DeepSpeed config dict asks for (0 when it has no zero_optimization section)."""
    return int((ds.get("zero_optimization") or {}).get("stage", 0))


def precision(ds: dict) -> str:
    """'bf16' (DeepSpeed's ``bf16`` section, or its legacy name ``bfloat16``), 'fp16' or 'fp32': the dtype the
    engine keeps the module in, casting a float32 module to it."""
    if (ds.get("bf16") or ds.get("bfloat16") or {}).get("enabled"):
        return "bf16"
    return "fp16" if (ds.get("fp16") or {}).get("enabled") else "fp32"
