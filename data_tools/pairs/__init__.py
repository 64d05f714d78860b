"""Parallel data behind ``xpt-data parallel`` (004): sentence pairs -> subword ids -> alignments both ways ->
parallel shards, manifest.json and dictionary.tsv (docs/shard_format.md, "Parallel shards").

- ``build``: the whole run (``ParallelOptions``, ``build_parallel``);
- ``parallel_text``: line-aligned files or a TSV -> sentence pairs with document ids; ``pair_tokenizers``: the
  source Hugging Face tokenizer and the target SentencePiece model, with file hashes;
- ``align``: fast_align (-d -o -v) in numpy, both directions, deterministic; ``align_eflomal``: the optional
  external eflomal program (GPL, run as a subprocess only);
- ``parallel_shards``: the shards (src/tgt ids, s2t/t2s links), split by document as the pipeline splits;
  ``dictionary``: dictionary.tsv, the bilingual dictionary induced from the links.
"""
