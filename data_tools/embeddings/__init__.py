"""Static subword embeddings and maps between embedding spaces, as ``embedding_files``' NAME.npy + NAME.json
(docs/embedding_format.md), behind ``xpt-data static-embeddings``, ``source-embeddings`` and ``align-embeddings``.

- ``word2vec``: word2vec (gensim, extra ``embeddings``) over piece ids; ``token_corpus``: shards (tarfile +
  numpy) or text -> id arrays; ``source_model``: a Hugging Face model's input-embedding matrix;
- ``mapping``: target embeddings mapped onto a source space (Procrustes or adversarial) and written;
  ``alignment``: Procrustes, normalisation, CSLS, induced dictionaries, MUSE's criterion (numpy);
  ``adversarial``: MUSE-style adversarial mapping + refinement (torch, CPU); ``bilingual_dict``: dictionary
  TSVs -> id pairs, with counts of what was left out;
- ``embedding_files``: the .npy + sidecar format, atomic writes, sha256 checks.
"""
