"""word2vec (gensim) over the piece ids of shards or text: the static embeddings of ``xpt-data
static-embeddings``, one row per token id, zero rows for pieces seen fewer than ``min_count`` times.

Library: gensim (``pip install 'xpt-ds[embeddings]'``, i.e. gensim==4.4.0), not fastText's wheels, because
* gensim is maintained, ships wheels for numpy 2 and builds against it (4.4.0); facebookresearch/fastText was
  archived in March 2024 and ``fasttext-wheel`` 0.9.2 predates numpy 2 (its ``predict`` calls
  ``np.array(copy=False)``, an error under numpy 2);
* it trains from a Python iterable of id lists, so shards stream straight in; fastText wants a text file;
* fastText's character n-grams need the piece strings, not ids; ``fasttext_pieces`` trains gensim's
  ``FastText`` on those (FOCUS's auxiliary space); here, on ids, there are none and it is word2vec;
* its determinism is documented: with one worker thread and a seed the bytes repeat (gensim 4.4 seeds the
  initial vectors from ``numpy.random.default_rng(seed)`` and negative sampling from ``RandomState(seed)``;
  ``hashfxn`` is only used by a deprecated code path, but a stable one is passed anyway so that Python's salted
  ``hash`` can never enter). ``--workers`` > 1 is faster but races on shared weights, so not reproducible.
Install weight: gensim's wheel is 28 MB (+ smart_open), fasttext-wheel 4 MB (+ pybind11).
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data_tools.typed_options import option
from data_tools.embeddings.token_corpus import ShardCorpus, TextCorpus, count_ids
from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import HfTokenizer, SpmTokenizer

GENSIM_PIN = "gensim==4.4.0"
# gensim's Cython routines silently cut a sentence after 10,000 tokens (MAX_WORDS_IN_BATCH); documents are
# split into chunks of at most this length instead, so no text is dropped.
GENSIM_MAX_SENTENCE = 10_000


@dataclass(frozen=True)
class TrainOptions:
    dim: int = option(300, "vector size; set it to the source model's hidden_size (e.g. 384, 768)")
    algorithm: str = option("skipgram", "word2vec objective", choices=("skipgram", "cbow"))
    window: int = option(5, "maximum distance between a piece and its context pieces")
    epochs: int = option(5, "passes over the text")
    min_count: int = option(5, "pieces seen fewer times get no vector (a zero row, listed in unseen_ids)")
    negative: int = option(5, "negative samples per positive pair")
    sample: float = option(1e-3, "down-sampling threshold for frequent pieces (0: off)")
    alpha: float = option(0.025, "initial learning rate, decayed linearly to min_alpha")
    min_alpha: float = option(1e-4, "final learning rate")
    seed: int = option(0, "seed of the initial vectors and of the sampling")
    workers: int = option(1, "gensim worker threads; only 1 gives the same bytes on every run")

    def validate(self) -> None:
        check_options(self, ("dim", "window", "epochs", "min_count", "negative", "workers"))


def check_options(opts, at_least_one: tuple[str, ...]) -> None:
    """The checks every gensim training's options share (word2vec here, ``fasttext_pieces``): the named
    fields are at least 1, and 0 < min_alpha <= alpha."""
    for name in at_least_one:
        if getattr(opts, name) < 1:
            raise PrepareError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(opts, name)}")
    if not 0 < opts.min_alpha <= opts.alpha:
        raise PrepareError(f"need 0 < --min-alpha <= --alpha, got {opts.min_alpha} and {opts.alpha}")


def stable_hash(text: str) -> int:
    """Replaces Python's per-process salted ``hash`` for gensim's ``hashfxn``."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def import_gensim():
    try:
        import gensim
        import gensim.models
    except ImportError:
        raise PrepareError(f"gensim is not installed: pip install 'xpt-ds[embeddings]' (or pip install "
                           f"{GENSIM_PIN})") from None
    return gensim


class PieceSentences:
    """gensim's corpus: each pass yields every id array as a list of string keys, split at 10,000 tokens. Keys:
    the ids as strings (word2vec), or ``keys[id]`` (fastText: the piece strings, for their character n-grams)."""

    def __init__(self, corpus: ShardCorpus | TextCorpus, keys: list[str] | None = None):
        self.corpus = corpus
        self.keys = keys if keys is not None else [str(i) for i in range(corpus.vocab_size)]

    def __iter__(self) -> Iterator[list[str]]:
        keys = self.keys
        for ids in self.corpus.arrays():
            for start in range(0, len(ids), GENSIM_MAX_SENTENCE):
                yield [keys[i] for i in ids[start:start + GENSIM_MAX_SENTENCE].tolist()]


def train_static_embeddings(corpus: ShardCorpus | TextCorpus, opts: TrainOptions) -> tuple[np.ndarray, dict]:
    """Returns the float32 [vocab_size, dim] matrix (zero rows for unseen ids) and the sidecar fields."""
    opts.validate()
    gensim = import_gensim()
    from gensim.models import Word2Vec
    counts, sequences = count_ids(corpus)
    if counts.sum() == 0:
        raise PrepareError("the corpus has no tokens")
    if counts.max() < opts.min_count:
        raise PrepareError(f"no piece occurs --min-count {opts.min_count} times (most frequent: {counts.max()})")
    model = Word2Vec(vector_size=opts.dim, window=opts.window, min_count=opts.min_count,
                     sg=int(opts.algorithm == "skipgram"), negative=opts.negative, hs=0, sample=opts.sample,
                     alpha=opts.alpha, min_alpha=opts.min_alpha, seed=opts.seed, workers=opts.workers,
                     epochs=opts.epochs, hashfxn=stable_hash, sorted_vocab=1, max_vocab_size=None)
    sentences = PieceSentences(corpus)
    model.build_vocab(corpus_iterable=sentences)
    model.train(corpus_iterable=sentences, total_examples=model.corpus_count, epochs=opts.epochs)
    ids = np.asarray([int(k) for k in model.wv.index_to_key], dtype=np.int64)
    matrix = np.zeros((corpus.vocab_size, opts.dim), dtype=np.float32)
    matrix[ids] = model.wv.vectors
    seen = np.zeros(corpus.vocab_size, dtype=bool)
    seen[ids] = True
    assert np.array_equal(seen, counts >= opts.min_count), "gensim's vocabulary differs from the id counts"
    meta = {"kind": "static", "method": "word2vec", "tokenizer": corpus.tokenizer.identity(),
            "unseen_rows": "zeros", "seen_count": int(seen.sum()), "unseen_ids": np.flatnonzero(~seen).tolist(),
            "counts": counts.tolist(), "corpus": {**corpus.info, "sequences": sequences, "tokens": int(counts.sum())},
            "library": {"name": "gensim", "version": gensim.__version__, "model": "Word2Vec"},
            "options": {"method": "word2vec", **asdict(opts)}, "created_by": "data_tools.cli.static_embeddings"}
    return matrix, meta


def build_corpus(shards: str | None, text: list[Path] | None, spm: Path | None,
                 hf_tokenizer: str | None) -> ShardCorpus | TextCorpus:
    if shards is not None:
        if text or spm or hf_tokenizer:
            raise PrepareError("--shards takes the tokenizer from the manifest: drop --text/--spm/--hf-tokenizer")
        return ShardCorpus(shards)
    if not text:
        raise PrepareError("give --shards MANIFEST[:SPLIT], or --text FILE... with --spm or --hf-tokenizer")
    if (spm is None) == (hf_tokenizer is None):
        raise PrepareError("--text needs exactly one of --spm MODEL and --hf-tokenizer DIR_OR_ID")
    return TextCorpus(text, SpmTokenizer(spm) if spm is not None else HfTokenizer(hf_tokenizer))
