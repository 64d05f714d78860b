"""Vocabulary extension (``xpt-data extend-vocab``): the source decoder's tokenizer plus target-language pieces
it lacks, every source id kept.

- ``source``: load the source tokenizer (a directory, a hub id or a ``.gguf`` file), tell its kind
  (SentencePiece-based or byte-level BPE), read the text files;
- ``bpe``: byte-level BPE sources: new pieces learned as merges on top of the source's own segmentation;
- ``sentencepiece``: SentencePiece sources: a target model trained and its new pieces appended to the proto;
- ``fertility``: pieces per word, bytes per piece, round trips and unchanged ids, before and after.
- ``extend``: the whole extension, written as one output folder (``extend_vocab``; ``xpt-data extend-vocab``).
"""
