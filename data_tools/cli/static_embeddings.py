"""Static embeddings of subword pieces, trained on tokenised text; rows indexed by token id.

    python -m data_tools.cli.static_embeddings --shards DIR/manifest.json:train --out emb/uk_focus --method fasttext
    python -m data_tools.cli.static_embeddings --shards DIR/manifest.json:train --out emb/uk --dim 384
    python -m data_tools.cli.static_embeddings --text a.txt b.txt --spm DIR/spm.model --out emb/uk --dim 384
    python -m data_tools.cli.static_embeddings --text en.txt --hf-tokenizer MODEL_DIR_OR_ID --out emb/en --dim 384

Two methods (``--method``; ``--method fasttext --help`` lists fastText's options and defaults):

* ``word2vec`` (default): gensim word2vec (skip-gram) over the piece ids (``data_tools.embeddings.word2vec``).
  These are the static embeddings that TreLM (Appendix A.1 and A.5: fastText skip-gram over the new subword
  vocabulary, at the model's hidden size) aligns onto the source model's input embeddings, and that ``aligned``
  (WECHSEL-style) starts from.
* ``fasttext``: gensim FastText (CBOW) over the piece strings with character n-grams 3-6 and FOCUS's defaults
  (dim 100, min count 10, 3 epochs, 10 negatives): FOCUS's auxiliary space, what ``model.embedding_init: focus``
  reads (``data_tools.embeddings.fasttext_pieces`` says what matches deepfocus and what does not).

Writes ``OUT.npy`` (float32 [vocab_size, dim]; row i = piece id i of that tokenizer) and the ``OUT.json``
sidecar (data_tools/embeddings/embedding_files.py): tokenizer identity, the method and every option, gensim's
version, per-id ``counts`` in the text and ``unseen_ids``. A piece seen fewer than ``--min-count`` times
(special tokens never occur in shards) gets no vector: its row is all zeros and it is listed in ``unseen_ids``.
Trained with gensim (extra ``embeddings``); with one ``--workers`` thread and a seed the bytes repeat.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from data_tools.typed_options import add_options, as_invoked, options_from_args
from data_tools.embeddings.embedding_files import writable_prefix, write_embeddings
from data_tools.embeddings.fasttext_pieces import FastTextOptions, train_fasttext_embeddings
from data_tools.embeddings.word2vec import TrainOptions, build_corpus, train_static_embeddings
from data_tools.errors import ArgumentParser, cli_errors

METHODS = {"word2vec": (TrainOptions, train_static_embeddings),
           "fasttext": (FastTextOptions, train_fasttext_embeddings)}


def build_parser(method: str = "word2vec", prog: str = "xpt-data static-embeddings") -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=as_invoked(__doc__, prog),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("input")
    g.add_argument("--shards", metavar="MANIFEST[:SPLIT]",
                   help="a prepared corpus: manifest.json (or its directory) and split, default train")
    g.add_argument("--text", nargs="+", type=Path, help="raw UTF-8 text files, one sequence per non-empty line")
    g.add_argument("--spm", type=Path, help="SentencePiece model for --text (the target language)")
    g.add_argument("--hf-tokenizer", metavar="DIR_OR_ID", help="Hugging Face tokenizer for --text (the source side)")
    p.add_argument("--out", required=True, type=Path, help="output prefix: writes OUT.npy and OUT.json")
    p.add_argument("--method", choices=tuple(METHODS), default="word2vec",
                   help="word2vec over piece ids, or fastText with character n-grams over piece strings (FOCUS's "
                        "auxiliary space); the training options below are this method's (default: word2vec)")
    add_options(p.add_argument_group(f"training ({method})"), METHODS[method][0])
    return p


def main(argv: list[str] | None = None, prog: str = "xpt-data static-embeddings") -> int:
    # The training options and their defaults depend on --method, so it is read first.
    pre = ArgumentParser(prog=prog, add_help=False)
    pre.add_argument("--method", choices=tuple(METHODS), default="word2vec")
    method = pre.parse_known_args(argv)[0].method
    a = build_parser(method, prog).parse_args(argv)
    options_cls, train = METHODS[method]
    with cli_errors():
        t0 = time.perf_counter()
        out = writable_prefix(a.out)
        corpus = build_corpus(a.shards, a.text, a.spm, a.hf_tokenizer)
        matrix, meta = train(corpus, options_from_args(options_cls, a))
        sidecar = write_embeddings(out, matrix, meta)
        print(f"static_embeddings: {method}, {meta['corpus']['tokens']} tokens, {meta['seen_count']}/{len(matrix)} "
              f"pieces seen, dim {matrix.shape[1]}, {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        print(sidecar.with_suffix(".npy"))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m data_tools.cli.static_embeddings"))
