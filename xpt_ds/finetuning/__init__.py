"""Downstream evaluation (002 Table 3): ``config`` (FinetuneConfig, Table A2's presets), ``data`` (CSV/TSV/JSONL
-> tokenized batches), ``metrics`` (accuracy, F1, correlations, entity F1) and ``run`` (one fine-tuning per seed).
"""
