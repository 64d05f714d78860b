"""English sources -> Ukrainian UA-GEC: the comparisons of issue 22 and their launch/ scripts.

- ``claims``: the papers' claims judged from ``launch/gpu_uagec.sh``'s sweeps (``OUT/claims.md``);
- ``compare_init`` and ``compare_trelm``: the reports of ``launch/compare_init_uagec.sh`` and
  ``launch/compare_trelm_uagec.sh``;
- ``base``, ``pilot``, ``budget`` and ``pack``: the decisions of ``launch/gpu_uagec.sh``'s GPU session (the base
  config of a step count, the steps per phase, the time budget in minutes, what is packed at its end).
"""
