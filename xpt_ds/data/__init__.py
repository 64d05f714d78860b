"""Token shards in, batches out.

- ``manifest``: which shard files a spec names, and what their manifest records (tokenizer, counts);
- ``shards``: random access to WebDataset token-id shards (docs/shard_format.md) through a per-shard index;
- ``tokenizer``: the tokenizer whose ids the shards hold (SentencePiece, or the source's HF tokenizer);
- ``mlm``: packed, dynamically masked MLM batches, exact and resumable across ranks and world sizes;
- ``mixture``: which corpus each packed row comes from when ``data.mix`` blends corpora;
- ``parallel``: sentence-pair rows from parallel shards (TreLM's CdLM).
"""
