"""The embedding_init strategies (registered in ``xpt_ds/embedding_init/registry.py``): each fills ``rows``, a
[target_vocab, hidden] float32 matrix, from an ``InitContext``.

Matching pieces across vocabularies. A target SentencePiece piece ``▁x`` is word-initial ``x``, a piece ``x``
is a word-internal ``x`` (an extended Hugging Face target's pieces are read by their own style, as a source's).
Source tokens are normalised by the style of their vocabulary: WordPiece (a ``##`` token exists): ``x`` is
word-initial, ``##x`` word-internal; byte-level BPE (a ``Ġ`` token exists): the token's characters are mapped back
to bytes (GPT-2's byte-to-unicode table) and decoded as UTF-8, a leading space makes it word-initial;
SentencePiece (``▁``) as for the target. A WordPiece source sees a word-internal target text as its own
pre-tokenizer would inside running text (``wordpiece_split``): BERT's cuts punctuation and CJK characters off as
words of their own, so ``,`` after a word is the word-initial ``,``, never ``##,`` (a row running text never
trains). A target piece overlaps a source token when both the word-initial flag and the text are equal; of several
source tokens the lowest id wins. Special tokens never overlap: the target's cls/sep/unk/mask rows take the source
tokenizer's cls/sep/unk/mask rows (``special``), in every strategy that uses the source tokenizer; the pad row
stays zero.

Frequency ranks (``frequency_rank``, 003 [lang->en][en]). Target ranks: non-special ids seen in
``data.train_shards`` by descending count (ties by id), then the unseen ones in id order. Source ranks: the
source vocabulary in id order (BERT's and RoBERTa's vocabularies are ordered by frequency or merge order),
leaving out special tokens, ``[unusedN]``/``<unusedN>`` placeholders and every token that is one character
after removing its word-boundary marker (BERT's single-character block after [unused], RoBERTa's 256 single
bytes and ``Ġx``). Target rank r takes source rank r; ranks beyond the source list fall back.

Fallback rows (``fallback``) are draws from ``source_mean``: N(mean, covariance) of all source rows, computed in
float64, with a diagonal covariance when hidden > ``full_covariance_max_dim`` or the covariance is not positive
definite; draws come from the context's seeded generator, one per fallback row in id order.
"""
from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from xpt_ds.config import ConfigError
from xpt_ds.config.embedding_args import EMBEDDING_INITS
from xpt_ds.embedding_init.files import hf_tokenizer_sha256, read_matrix, target_identity

if TYPE_CHECKING:
    from xpt_ds.embedding_init.context import InitContext, Rows

log = logging.getLogger(__name__)

UNUSED = re.compile(r"^[\[<]unused\d+[\]>]$")
GLUE = "a"  # a letter: a WordPiece pre-tokenizer keeps the text after it in its word unless it cuts there
CHUNK = 256  # target rows per similarity block: CHUNK x candidates float64 (100 MB for 50K candidates)


def init_random(ctx: InitContext, rows: Rows) -> None:
    """002 eq. 7: N(0, initializer_range), from the context's generator (seeded with init_seed and the
    parameter's name, as every new parameter's draw is: ``xpt_ds.model.values.stock_init``)."""
    m = torch.empty_like(rows.matrix)
    nn.init.normal_(m, std=ctx.std, generator=ctx.generator)
    rows.matrix.copy_(m)
    rows.kind[rows.kind == ""] = "random"


def init_source_mean(ctx: InitContext, rows: Rows) -> None:
    fill_fallback(ctx, rows, kind="fallback")


def init_frequency_rank(ctx: InitContext, rows: Rows) -> None:
    map_specials(ctx, rows)
    counts, special = ctx.counts, set(ctx.tok.special_ids)
    ids = [i for i in range(ctx.tok.vocab_size) if i not in special]
    seen = sorted((i for i in ids if counts[i] > 0), key=lambda i: (-int(counts[i]), i))
    order = seen + [i for i in ids if counts[i] == 0]
    for (i, (sid, token)) in zip(order, source_ranked(ctx)):
        rows.copy(i, sid, token)
    fill_fallback(ctx, rows)


def init_overlap_copy(ctx: InitContext, rows: Rows) -> None:
    map_specials(ctx, rows)
    for i, (sid, token) in overlap(ctx).items():
        rows.copy(i, sid, token)
    fill_fallback(ctx, rows)


def init_focus(ctx: InitContext, rows: Rows) -> None:
    """FOCUS (Dobler & de Melo 2023): overlapping pieces copy; every other piece with a static vector is the
    sparsemax(cosine similarity in the static space) combination of the overlapping pieces' source rows. The
    static space is FOCUS's auxiliary one when made by ``data_tools.cli.static_embeddings --method fasttext``
    (fastText over piece strings; its pieces below min count have no vector, so they fall back, as FOCUS's
    "very rare" pieces do); fed deepfocus 1.0.1's own vectors this gives its rows (benchmarks/
    compare_focus_reference.py)."""
    static = read_matrix(ctx.args["static"], "static", ctx.tok.vocab_size, *target_identity(ctx.tok))
    method = static.meta.get("method") or (static.meta.get("options") or {}).get("method", "word2vec")
    if method != "fasttext":  # a file written before --method existed is word2vec's
        log.warning("focus: %s is a %s space, not FOCUS's auxiliary fastText space (xpt-data static-embeddings "
                    "--method fasttext); its rare pieces can become hubs (RESULTS.md)", static.path, method)
    map_specials(ctx, rows)
    shared = overlap(ctx)
    for i, (sid, token) in shared.items():
        rows.copy(i, sid, token)
    anchors = [i for i in shared if static.seen[i]]
    todo = [i for i in rows.unset() if static.seen[i]]
    if anchors and todo:
        anchor_rows = ctx.source_embeddings[[shared[i][0] for i in anchors]].double()
        anchor_vecs = _unit(static.matrix[anchors])
        tokens = [shared[i][1] for i in anchors]
        for lo in range(0, len(todo), CHUNK):
            ids = todo[lo:lo + CHUNK]
            weights = sparsemax(_unit(static.matrix[ids]) @ anchor_vecs.T)
            _combine(rows, ids, weights, anchor_rows, tokens)
    fill_fallback(ctx, rows)


def init_aligned(ctx: InitContext, rows: Rows) -> None:
    """WECHSEL (Minixhofer et al. 2022): target static vectors mapped into the source static space; each target
    piece is softmax(cosine / temperature) over its top_k most similar source tokens, applied to their rows."""
    stok = ctx.source_tokenizer
    target = read_matrix(ctx.args["target"], "target", ctx.tok.vocab_size, *target_identity(ctx.tok))
    source = read_matrix(ctx.args["source"], "source", len(stok), hf_tokenizer_sha256(ctx.source), "hf")
    mapped_to = (target.meta.get("source_tokenizer") or {}).get("sha256")
    if mapped_to is not None and mapped_to != (source.meta.get("tokenizer") or {}).get("sha256"):
        raise ConfigError(f"config key 'model.embedding_init_args.target': {target.path} was mapped into the space "
                          f"of another tokenizer than {source.path}'s")
    if target.matrix.shape[1] != source.matrix.shape[1]:
        raise ConfigError(f"config key 'model.embedding_init_args.target': {target.path} has dim "
                          f"{target.matrix.shape[1]} but {source.path} has {source.matrix.shape[1]}")
    map_specials(ctx, rows)
    special = set(stok.all_special_ids)
    cands = [j for j in range(min(len(stok), ctx.source_embeddings.shape[0])) if source.seen[j] and j not in special]
    todo = [i for i in rows.unset() if target.seen[i]]
    k, tau = min(ctx.args["top_k"], len(cands)), ctx.args["temperature"]
    if k < 1 or tau <= 0:
        raise ConfigError("config keys 'model.embedding_init_args.top_k/temperature' must be >= 1 and > 0")
    if cands and todo:
        cand_vecs = _unit(source.matrix[cands])
        cand_rows = ctx.source_embeddings[cands].double()
        tokens = stok.convert_ids_to_tokens(cands)
        for lo in range(0, len(todo), CHUNK):
            ids = todo[lo:lo + CHUNK]
            weights = softmax_top_k(_unit(target.matrix[ids]) @ cand_vecs.T, k, tau)
            _combine(rows, ids, weights, cand_rows, tokens)
    fill_fallback(ctx, rows)


def init_from_file(ctx: InitContext, rows: Rows) -> None:
    f = read_matrix(ctx.args["path"], "path", ctx.tok.vocab_size, *target_identity(ctx.tok))
    if f.matrix.shape[1] != ctx.hidden:
        raise ConfigError(f"config key 'model.embedding_init_args.path': {f.path} has dim {f.matrix.shape[1]} but "
                          f"the model's hidden size is {ctx.hidden}")
    for i in rows.unset():
        if f.seen[i]:  # unseen_ids are all-zero rows: the reader fills them (docs/embedding_format.md)
            rows.set(i, torch.from_numpy(f.matrix[i].copy()), "copied", [f.path.name])
    fill_fallback(ctx, rows)


def _unit(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _combine(rows: Rows, ids: list[int], weights: np.ndarray, source_rows: torch.Tensor, tokens: list[str]) -> None:
    """rows[ids] = weights [len(ids), n] @ source_rows [n, hidden] (float64, then float32)."""
    combined = (torch.from_numpy(weights) @ source_rows).float()
    for r, i in enumerate(ids):
        rows.set(i, combined[r], "combined", [[tokens[j], round(float(weights[r, j]), 4)]
                                              for j in top_indices(weights[r], 3) if weights[r, j] > 0])


def sparsemax(z: np.ndarray) -> np.ndarray:
    """Row-wise sparsemax (Martins & Astudillo 2016): the Euclidean projection onto the simplex."""
    zs = -np.sort(-z, axis=1)
    k = np.arange(1, z.shape[1] + 1)
    cum = np.cumsum(zs, axis=1)
    support = (1 + k * zs > cum).sum(axis=1)  # the support is a prefix of the sorted row
    tau = (cum[np.arange(len(z)), support - 1] - 1) / support
    return np.maximum(z - tau[:, None], 0.0)


def top_indices(v: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries of 1-D ``v``, largest first, ties by index (O(n) unless many tie)."""
    k = min(k, len(v))
    kth = np.partition(v, len(v) - k)[len(v) - k]
    cand = np.flatnonzero(v >= kth)
    return cand[np.lexsort((cand, -v[cand]))[:k]]


def softmax_top_k(sims: np.ndarray, k: int, tau: float) -> np.ndarray:
    """Row-wise softmax(sims / tau) over each row's k largest entries (ties by index), zero elsewhere."""
    out = np.zeros_like(sims)
    for r, row in enumerate(sims):
        top = top_indices(row, k)
        e = np.exp((row[top] - row[top[0]]) / tau)
        out[r, top] = e / e.sum()
    return out


FULL_COVARIANCE_MAX_DIM = EMBEDDING_INITS["source_mean"][0]["full_covariance_max_dim"]


def sample_source_mean(ctx: InitContext, n: int) -> torch.Tensor:
    """float32 [n, hidden] draws of N(mean, covariance) of the source rows (see the module docstring)."""
    src = ctx.source_embeddings.double()
    mean = src.mean(0)
    z = torch.randn(n, src.shape[1], generator=ctx.generator, dtype=torch.float64)
    full_max = ctx.args.get("full_covariance_max_dim", FULL_COVARIANCE_MAX_DIM)  # another strategy's fallback
    if src.shape[1] <= full_max and src.shape[0] > src.shape[1]:
        centered = src - mean
        chol, info = _cholesky(centered.T @ centered / (src.shape[0] - 1))
        if int(info) == 0:
            return (mean + z @ chol.T).float()
    return (mean + z * src.std(0)).float()


def _cholesky(cov: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.cholesky_ex(cov)`` on one thread: MKL's float64 factor (torch 2.13) has other bits on 2
    threads than on 1, so a one-process run and a torchrun job (OMP_NUM_THREADS=1) drew other rows; the covariance
    and ``z @ factor.T`` are the same on either count. One thread costs 0.15 s at hidden 2048, 1.4 s at 4096."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return torch.linalg.cholesky_ex(cov)
    finally:
        torch.set_num_threads(threads)


def fill_fallback(ctx: InitContext, rows: Rows, kind: str = "fallback") -> None:
    todo = rows.unset()
    if todo:
        draws = sample_source_mean(ctx, len(todo))
        for r, i in enumerate(todo):
            rows.set(i, draws[r], kind, ["source_mean"])


def map_specials(ctx: InitContext, rows: Rows) -> None:
    """Target cls/sep/unk/mask rows <- the source tokenizer's; the pad row stays zero. A source without cls or
    sep (a decoder's: GPT-2, Llama) gives its bos or eos instead, which is what those rows mean there."""
    stok, t = ctx.source_tokenizer, ctx.tok
    for tid, name, instead in ((t.cls_id, "cls_token", "bos_token"), (t.sep_id, "sep_token", "eos_token"),
                               (t.unk_id, "unk_token", ""), (t.mask_id, "mask_token", "")):
        token = getattr(stok, name, None) or (getattr(stok, instead, None) if instead else None)
        sid = stok.convert_tokens_to_ids(token) if token else None
        if tid != t.pad_id and not rows.kind[tid] and sid is not None and sid < ctx.source_embeddings.shape[0]:
            rows.copy(tid, sid, token, kind="special")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode table, inverted: printable stand-in character -> byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def vocab_style(tokens: list[str]) -> str:
    if any(t.startswith("##") and len(t) > 2 for t in tokens):
        return "wordpiece"
    if any(t.startswith("Ġ") for t in tokens):
        return "byte_bpe"
    return "sentencepiece"


def tokenizer_style(stok) -> str:
    """``vocab_style`` of a Hugging Face tokenizer, from its pipeline where it has one: a byte-level BPE vocabulary
    holds ``###`` and ``####`` (markdown, code; SmolLM2's does), which ``vocab_style`` takes for WordPiece."""
    backend = getattr(stok, "backend_tokenizer", None)
    if backend is None:
        return vocab_style(list(stok.get_vocab()))
    if type(backend.model).__name__ == "WordPiece":
        return "wordpiece"
    return "byte_bpe" if "ByteLevel" in f"{backend.pre_tokenizer}{backend.decoder}" else "sentencepiece"


def source_surface(token: str, style: str) -> tuple[bool, str]:
    """(word-initial, text) of a source token."""
    if style == "wordpiece":
        return (False, token[2:]) if token.startswith("##") and len(token) > 2 else (True, token)
    if style == "byte_bpe":
        dec = _byte_decoder()
        if all(c in dec for c in token):
            try:
                text = bytes(dec[c] for c in token).decode("utf-8")
            except UnicodeDecodeError:
                text = token  # part of a multi-byte character: matches no target piece
            return (True, text[1:]) if text.startswith(" ") else (False, text)
    return target_surface(token)


def target_style(tok) -> str:
    """'sentencepiece', 'byte_level' or 'wordpiece': how the target's pieces mark a word start."""
    return tok.marker_style if tok.kind == "huggingface" else "sentencepiece"


def target_surface(piece: str, style: str = "sentencepiece") -> tuple[bool, str]:
    """(word-initial, text) of a target piece of ``target_style`` ``style``: an extended byte-level vocabulary's
    ``Ġпри`` is decoded as a byte-level source's token is."""
    if style == "byte_level":
        return source_surface(piece, "byte_bpe")
    if style == "wordpiece":
        return source_surface(piece, "wordpiece")
    return (True, piece[1:]) if piece.startswith("▁") else (False, piece)


def wordpiece_split(backend, text: str) -> tuple[str, list[str]]:
    """(the part of the word-internal ``text`` that continues the word before it, the words after it) as a WordPiece
    source's normaliser and pre-tokenizer (``backend``: its tokenizers pipeline) cut that text inside running text:
    BERT's cut each punctuation mark and CJK character off as a word of its own, so ``x),`` is x ) , and ``x中国``
    is x 中 国. Only the continuation takes ``##`` tokens; the words start as any word does."""
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    if backend.pre_tokenizer is None:
        return text, []
    words = [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(GLUE + text)]
    if not words or not words[0].startswith(GLUE):  # not a pre-tokenizer that keeps text: the text continues
        return text, []
    return words[0][len(GLUE):], words[1:]


def _wordpiece_surface(backend, text: str) -> tuple[bool, str] | None:
    """(word-initial, text) of a word-internal target ``text`` for a WordPiece source (``wordpiece_split``); None
    when the source cuts it into several words, which no one token spells."""
    glued, words = wordpiece_split(backend, text)
    if not words:
        return False, text
    return (True, text) if not glued and len(words) == 1 else None


def _source_tokens(ctx: InitContext) -> list[tuple[int, str]]:
    """(id, token) of the source vocabulary in id order, specials left out, ids within the embedding matrix."""
    stok = ctx.source_tokenizer
    special = set(stok.all_special_ids)
    vocab = sorted((i, t) for t, i in stok.get_vocab().items())
    return [(i, t) for i, t in vocab if i not in special and i < ctx.source_embeddings.shape[0]]


def overlap(ctx: InitContext) -> dict[int, tuple[int, str]]:
    """Target id -> (source id, source token) for non-special target pieces equal to a source token."""
    tokens = _source_tokens(ctx)
    style = tokenizer_style(ctx.source_tokenizer)
    by_surface: dict[tuple[bool, str], tuple[int, str]] = {}
    for i, t in tokens:
        initial, text = source_surface(t, style)
        if text:
            by_surface.setdefault((initial, text), (i, t))
    special, target = set(ctx.tok.special_ids), target_style(ctx.tok)
    backend = getattr(ctx.source_tokenizer, "backend_tokenizer", None) if style == "wordpiece" else None
    out = {}
    for i, piece in enumerate(ctx.pieces):
        key: tuple[bool, str] | None = target_surface(piece, target)
        if backend is not None and not key[0] and key[1]:
            key = _wordpiece_surface(backend, key[1])
        if i not in special and key and key[1] and key in by_surface:
            out[i] = by_surface[key]
    return out


def source_ranked(ctx: InitContext) -> list[tuple[int, str]]:
    """Source (id, token) by rank: id order without placeholders and single characters (module docstring)."""
    tokens = _source_tokens(ctx)
    style = tokenizer_style(ctx.source_tokenizer)
    out = []
    for i, t in tokens:
        if not UNUSED.match(t) and len(source_surface(t, style)[1]) > 1:
            out.append((i, t))
    return out
