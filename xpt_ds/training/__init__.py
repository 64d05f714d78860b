"""The training loop and everything it owns: ``trainer`` (the phase-aware loop), ``engine`` (DeepSpeed per
phase), ``checkpoint`` (save, resume, rescale), ``guards`` (non-finite steps, spikes, slow ranks),
``preemption``, ``status`` (RUN_DIR/status.json) and ``export`` (a checkpoint -> a stock HF model directory).
"""
