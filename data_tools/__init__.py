"""Corpus preparation: raw text -> sentences -> splits -> SentencePiece -> WebDataset shards; parallel shards;
static subword embeddings and their alignment.

Standalone: ``xpt_ds`` never imports this package, nor this package ``xpt_ds``. The contracts are
docs/shard_format.md and docs/embedding_format.md.

Code map (lower layers never import higher ones; ``tests/test_layers.py`` checks):

- ``cli/``: the commands ``prepare``, ``spm_train``, ``uagec``, ``bible``, ``parallel``, ``static_embeddings``,
  ``source_embeddings``, ``align_embeddings``, ``extend_vocab`` (each ``python -m data_tools.cli.<name>`` and
  ``xpt-data <name>``, dashes for underscores; ``cli/__init__`` is the ``xpt-data`` dispatcher), thin: parse,
  call the library, report;
- ``pairs/``, ``embeddings/``, ``corpora/``: parallel shards, alignments and dictionary.tsv; static embeddings and
  maps between spaces; UA-GEC and the Bible as input files (none imports another); ``vocab_merge/``: a source
  tokenizer extended with target pieces;
- ``pipeline/``: ``prepare``'s stages, ``PrepareOptions``, the shard writer and manifest, the output directory's
  state and lock, logging;
- shared leaves: ``piece_tokenizers`` (SentencePiece and Hugging Face tokenizers behind one interface, with their
  identity), ``typed_options`` (typed dataclass options -> argparse flags), ``errors`` (PrepareError and the CLIs'
  one ``error:`` line).
"""
