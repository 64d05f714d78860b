"""xpt-ds: cross-lingual post-training (XPT, 002) of English masked language models on DeepSpeed.

Code map (lower layers never import higher ones; ``tests/test_layers.py`` checks):

- ``cli/``: the commands ``train``, ``export``, ``evaluate``, ``finetune``, ``sweep``, ``status``, ``probe`` (each
  ``python -m xpt_ds.cli.<name>`` and ``xpt-ds <name>``; ``cli/__init__`` is the ``xpt-ds`` dispatcher), thin:
  parse, call the library, report;
- ``sweeps/``: every method at every data size, and the comparison reports;
- ``evaluation/``, ``finetuning/``: intrinsic metrics and the probe; downstream fine-tuning;
- ``training/``: ``build_trainer`` and its components, the phase-aware loop, the DeepSpeed engine, guards, the
  time budget;
- ``checkpoint/``: save and load through a state registry, older formats (``migrate``), tag checks, branches,
  frozen values, export and the model card;
- ``runtime/``: processes and the cluster: distributed setup, ports, the run lock, rank messages, preemption,
  status heartbeat, the collector, op builds, how a command's process ends;
- ``model/``: the ITL-extended model, adapters, per-phase trainable parameters, the MLM objective;
- ``trelm/``: TreLM's TRILayer, objective, batches and exported model (004);
- ``embedding_init/``: where the new word embeddings start (random, source_mean, focus, aligned, ...);
- ``data/``, ``metrics/``: shards, tokenizers and masked batches; MLM metrics, throughput and logging;
- ``io/``: writable paths, and what xpt-ds trusts (no code from files it did not write);
- ``config/``: the typed config tree, its loading and checks, the method table; ``errors``: one-line errors.

Corpus preparation is the separate package ``data_tools`` (``xpt-data``), joined only by docs/shard_format.md;
engine configs are in ``ds_configs``.
"""
__version__ = "0.1.0"
