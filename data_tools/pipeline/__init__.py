"""The preparation pipeline behind ``xpt-data prepare``: raw text -> sentences -> splits -> SentencePiece ->
WebDataset shards + manifest.json (docs/shard_format.md).

- ``run``: every stage in one call (``run_pipeline``, ``prepare``); ``options``: ``PrepareOptions``, every option
  with its one default, help and flag;
- the stages: ``clean`` (read, normalise, sentence-split, filter, dedupe), ``split`` (by document), ``vocab``
  (the spm stage: train SentencePiece or copy a model), ``shard_stage`` (tokenize into shards, resumable);
- what they use: ``readers`` (text, WikiExtractor, JSON lines; gzip/bzip2/xz), ``text`` (normalisation,
  cleaning, the pluggable sentence splitter), ``spm_trainer`` and ``spm_layouts`` (SentencePiece with the source
  family's special-token layout), ``shards`` (shard planning, the parallel resumable writer, manifest.json),
  ``state`` (the output directory's layout, each stage's record under ``.prepare/``, the lock), ``log``.
"""
