"""xpt-ds: cross-lingual post-training (XPT) of English masked language models on DeepSpeed.

Entry points (``python -m xpt_ds.<name> --help``): ``train``, ``export``, ``evaluate``, ``probe``, ``finetune``,
``sweep``. Corpus preparation is the separate package ``data_tools``; engine configs are in ``ds_configs``.
"""
__version__ = "0.1.0"
