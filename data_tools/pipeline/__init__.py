"""The preparation pipeline behind ``xpt-data prepare``: raw text -> sentences -> splits -> SentencePiece ->
WebDataset shards + manifest.json (docs/shard_format.md).

- ``run``: every stage in one call (``run_pipeline``, ``prepare``); ``options``: ``PrepareOptions``, every option
  with its one default, help and flag;
- the stages: ``clean/`` (read, normalise, sentence-split, filter, dedupe: ``stage``, its resume points
  ``resume`` and the dedupe arrays ``seen``), ``split`` (by document), ``spm/`` (train SentencePiece or copy a model:
  ``stage``, with ``trainer`` and the source family's special-token ``layouts``), ``shard_stage`` (tokenize into
  shards, resumable);
- what they use: ``readers`` (text, WikiExtractor, JSON lines; gzip/bzip2/xz), ``text`` (normalisation,
  cleaning, the pluggable sentence splitter), ``shards`` (shard planning, the parallel resumable writer,
  manifest.json), ``state`` (the output directory's layout, each stage's record under ``.prepare/``, the lock),
  ``workers`` (the stages' worker processes), ``log``.
"""
