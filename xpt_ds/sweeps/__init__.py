"""Comparisons across methods and data sizes, what any sweep needs: ``plan`` and ``runner`` (``python -m
xpt_ds.cli.sweep``), ``stages`` (its runs' child processes and in-process calls), ``scoring`` (how a trained run is
scored: test shards, fine-tuning, raw text), ``rows`` and ``seeds`` (its results.jsonl, replicates folded),
``report`` (002 Table 2 per size, plots, the data-efficiency ratio) and ``curves`` (a run's validation curve, for
reports that compare runs). A study's own verdicts and reports live beside the library, in ``experiments/``.
"""
