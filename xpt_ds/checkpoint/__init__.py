"""Checkpoints and what reads them: ``checkpointer`` (the run's checkpoints as one component, with the ``registry`` of
what each holds), ``store`` (the files: save, load), ``tags`` (which tags count: markers, ``best``, prune;
torch-free), ``universal`` (a resume at another world size or ZeRO stage) with ``universal_stages`` (its copy as each
stage reads it), ``migrate`` (every older layout, read as today's), ``rng``, ``frozen`` (the exact fp32 values beside
an engine), ``values`` (a checkpoint's values one at a time), ``tag_checks`` (a tag checked before it is loaded),
``branches`` and ``phase_ends``. Evaluation, export (``xpt_ds.export``) and sweeps read checkpoints here, without the
training loop.
"""
