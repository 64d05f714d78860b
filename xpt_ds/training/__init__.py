"""The training loop and everything it owns: ``trainer`` (the phase-aware loop), ``engine`` (DeepSpeed per
phase), ``fill`` (every value put into an engine once: a fresh start, a resume, the phase hand-over),
``frozen`` (the exact fp32 values beside an engine), ``checkpoint`` (save, resume, rescale), ``checkpoint_values``
(a checkpoint's values one at a time, and the value files beside DeepSpeed's), ``guards`` (non-finite steps,
spikes, slow ranks), ``preemption``, ``status`` (RUN_DIR/status.json) and ``export`` (a checkpoint -> a stock HF
model directory, streamed).
"""
