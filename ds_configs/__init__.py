"""Engine-only DeepSpeed configs (ZeRO stage, precision, offload), installed with xpt-ds.

A run config's ``deepspeed`` key takes a path, or the name of one of these files (``zero2_bf16``,
``ds_configs/zero2_bf16.json``), which then works from any working directory. Batch sizes, the optimizer,
the learning-rate schedule and clipping come from the run config; ``xpt_ds.training.engine`` rejects a DeepSpeed JSON
that sets them.
"""
