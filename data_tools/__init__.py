"""Corpus preparation: raw text -> sentences -> splits -> SentencePiece -> WebDataset shards.

Standalone: ``xpt_ds`` never imports this package. The contract is docs/shard_format.md.
"""
