"""English decoder (SmolLM2-135M) -> Ukrainian: the comparisons of issue 57 and ``launch/gpu_decoder.sh``.

- ``claims``: does XPT help a decoder against LoRA, vocabulary extension and continued pretraining, and what does
  each method cost English, judged from the session's three sweeps (``OUT/claims.md``);
- ``source``, ``sizes`` and ``pack``: the session's steps (the source as a model directory, each sweep's training
  sizes in its own pieces, the reports and verdicts before the archive);
- ``lexicon_tags``: a word-tagging task for ``xpt-ds finetune`` that only the source's English knowledge solves.
"""
