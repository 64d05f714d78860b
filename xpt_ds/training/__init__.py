"""The training loop and what it is assembled from: ``build`` (``build_trainer``: every check, every component,
the state each registers for checkpoints), ``trainer`` (the phase-aware loop), ``phase_engine`` (the current
phase's module and DeepSpeed engine, and the hand-over between phases), ``engine`` (DeepSpeed's config and
engine), ``fill`` (every value put into an engine once), ``streams`` and ``validation``, ``guards`` (non-finite
steps, spikes, slow ranks), ``best`` (the best checkpoint, early stopping), ``time_budget``, ``state`` and
``compile`` (activation checkpointing: ``xpt_ds.model.forward.recompute``). Checkpoint files: ``xpt_ds.checkpoint``;
processes and the cluster: ``xpt_ds.runtime``.
"""
