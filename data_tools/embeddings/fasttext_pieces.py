"""fastText (gensim ``FastText``) over the piece STRINGS of shards or text, with character n-grams: FOCUS's
auxiliary space (Dobler & de Melo 2023), one row per token id, zero rows for pieces seen fewer than
``min_count`` times.

What FOCUS does (``deepfocus`` 1.0.1, ``fasttext_embs.train_fasttext`` and ``focus.FOCUS``): every line of
the target text is tokenised by the target tokenizer, the piece strings are joined by spaces (``▁сло во``) and
Facebook's ``fasttext.train_unsupervised`` is trained on that file with ``model="cbow"``, ``dim=100``,
``epoch=3``, ``minCount=10``, ``neg=10`` and the library's other defaults (``lr`` 0.05, ``ws`` 5, ``minn`` 3,
``maxn`` 6, ``bucket`` 2,000,000, ``t`` 1e-4, ``wordNgrams`` 1, ``thread`` = all cores, ``seed`` 0). A piece
fastText kept (>= minCount) gets ``get_word_vector``: the mean of its own vector and its n-grams' vectors.
A piece below minCount is "very rare" in FOCUS (``is_very_rare_token``: ``token not in model``): it gets no
auxiliary vector, neither as an anchor nor as a combined row (FOCUS draws it from N(source mean, source std)).
So it is an unseen (zero) row here too, not an n-gram-only vector.

The same training in gensim 4.4 (the extra ``embeddings``; ``data_tools.embeddings.word2vec`` says why not the
``fasttext`` wheels): ``sg=0`` with ``cbow_mean=1`` is fastText's CBOW, ``sample`` is fastText's ``t`` (the
same keep probability, sqrt(t/f) + t/f), and ``ns_exponent=0.5`` is the power fastText's negative-sampling table
uses (gensim's default is word2vec's 0.75). gensim's word vector of a kept piece is the same mean of its own and
its n-grams' vectors. Left different: fastText also trains an end-of-line token ``</s>`` per line (one array per
line of ``--text`` or per document of ``--shards`` here, without it), fastText decays the learning rate to 0
(gensim to ``min_alpha``), and the random streams differ, so the vectors are not fastText's bits; how close
the resulting FOCUS rows are is measured by benchmarks/compare_focus_reference.py (RESULTS.md). With one worker
and a seed the bytes repeat.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from data_tools.typed_options import option
from data_tools.embeddings.token_corpus import ShardCorpus, TextCorpus, count_ids
from data_tools.embeddings.word2vec import PieceSentences, check_options, import_gensim, stable_hash
from data_tools.errors import PrepareError


@dataclass(frozen=True)
class FastTextOptions:
    """Defaults: FOCUS's (deepfocus 1.0.1 ``FOCUS`` and ``train_fasttext``, fastText 0.9's defaults otherwise)."""
    dim: int = option(100, "vector size (FOCUS: 100; the space is only compared by cosine, never copied)")
    algorithm: str = option("cbow", "fastText objective (FOCUS: cbow)", choices=("cbow", "skipgram"))
    window: int = option(5, "maximum distance between a piece and its context pieces")
    epochs: int = option(3, "passes over the text (FOCUS: 3)")
    min_count: int = option(10, "pieces seen fewer times get no vector (a zero row, listed in unseen_ids; FOCUS: 10)")
    negative: int = option(10, "negative samples per positive pair (FOCUS: 10)")
    ns_exponent: float = option(0.5, "power of the counts in the negative-sampling table (fastText: 0.5)")
    sample: float = option(1e-4, "down-sampling threshold for frequent pieces, fastText's t (0: off)")
    alpha: float = option(0.05, "initial learning rate, decayed linearly to min_alpha (fastText: 0.05)")
    min_alpha: float = option(1e-4, "final learning rate")
    min_n: int = option(3, "shortest character n-gram (fastText: 3)")
    max_n: int = option(6, "longest character n-gram (fastText: 6; below min_n: no n-grams)")
    bucket: int = option(2_000_000, "hash buckets of the n-gram vectors (fastText: 2,000,000; 4 x dim bytes each)")
    seed: int = option(0, "seed of the initial vectors and of the sampling")
    workers: int = option(1, "gensim worker threads; only 1 gives the same bytes on every run")

    def validate(self) -> None:
        check_options(self, ("dim", "window", "epochs", "min_count", "negative", "min_n", "bucket", "workers"))


def piece_strings(corpus: ShardCorpus | TextCorpus) -> list[str]:
    """The piece of every id; fastText splits its text on whitespace, so a piece must be one non-empty word."""
    pieces = [corpus.tokenizer.id_to_piece(i) for i in range(corpus.vocab_size)]
    seen: dict[str, int] = {}
    for i, p in enumerate(pieces):
        if not p or p.split() != [p]:
            raise PrepareError(f"piece {i} ({p!r}) is empty or holds whitespace; fastText cannot train on it")
        if p in seen:
            raise PrepareError(f"pieces {seen[p]} and {i} are both {p!r}; rows by piece string would collide")
        seen[p] = i
    return pieces


def train_fasttext_embeddings(corpus: ShardCorpus | TextCorpus, opts: FastTextOptions) -> tuple[np.ndarray, dict]:
    """Returns the float32 [vocab_size, dim] matrix (zero rows for pieces below min_count) and the sidecar
    fields."""
    opts.validate()
    gensim = import_gensim()
    from gensim.models import FastText
    counts, sequences = count_ids(corpus)
    if counts.sum() == 0:
        raise PrepareError("the corpus has no tokens")
    if counts.max() < opts.min_count:
        raise PrepareError(f"no piece occurs --min-count {opts.min_count} times (most frequent: {counts.max()})")
    pieces = piece_strings(corpus)
    model = FastText(vector_size=opts.dim, window=opts.window, min_count=opts.min_count,
                     sg=int(opts.algorithm == "skipgram"), cbow_mean=1, negative=opts.negative, hs=0,
                     ns_exponent=opts.ns_exponent, sample=opts.sample, alpha=opts.alpha, min_alpha=opts.min_alpha,
                     min_n=opts.min_n, max_n=opts.max_n, bucket=opts.bucket, word_ngrams=1, seed=opts.seed,
                     workers=opts.workers, epochs=opts.epochs, hashfxn=stable_hash, sorted_vocab=1,
                     max_vocab_size=None)
    sentences = PieceSentences(corpus, pieces)
    model.build_vocab(corpus_iterable=sentences)
    model.train(corpus_iterable=sentences, total_examples=model.corpus_count, epochs=opts.epochs)
    index = {p: i for i, p in enumerate(pieces)}
    ids = np.asarray([index[k] for k in model.wv.index_to_key], dtype=np.int64)
    matrix = np.zeros((corpus.vocab_size, opts.dim), dtype=np.float32)
    matrix[ids] = model.wv.vectors  # kept pieces: the mean of the piece's own vector and its n-grams'
    seen = np.zeros(corpus.vocab_size, dtype=bool)
    seen[ids] = True
    assert np.array_equal(seen, counts >= opts.min_count), "gensim's vocabulary differs from the id counts"
    meta = {"kind": "static", "method": "fasttext", "tokenizer": corpus.tokenizer.identity(), "unseen_rows": "zeros",
            "seen_count": int(seen.sum()), "unseen_ids": np.flatnonzero(~seen).tolist(),
            "counts": counts.tolist(), "corpus": {**corpus.info, "sequences": sequences, "tokens": int(counts.sum())},
            "library": {"name": "gensim", "version": gensim.__version__, "model": "FastText"},
            "options": {"method": "fasttext", **asdict(opts)}, "created_by": "data_tools.cli.static_embeddings"}
    return matrix, meta
