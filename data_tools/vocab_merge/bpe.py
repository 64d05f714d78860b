"""New pieces for a byte-level BPE source (GPT-2, Llama 3, Qwen, SmolLM2), learned as merges.

What is done: the target text goes through the source's own normaliser, pre-tokenizer and BPE, so every word
starts as the source segments it; BPE training then simply goes on from there: count adjacent token pairs over the
word counts, merge the most frequent one, repeat, until ``add`` new pieces (or no pair is seen twice). Each new
merge is appended to the source's merge list, and its piece takes the next id after the source's last.

Why merges and not "added tokens": an added token is matched in the raw text before BPE runs, longest first and
regardless of context, so it would cut English words that happen to contain it and bypass the pre-tokenizer;
a merge is applied by BPE inside one pre-tokenized word, like every source piece. Why continue training rather
than train a target BPE with the ``tokenizers`` trainer and append its merges: that trainer starts from single
bytes, so its merges assume a segmentation the source's merges never produce (the source joins ``ab`` + ``c``
where the target merge wants ``a`` + ``bc``), and many of its pieces would never appear. A continued merge is by
construction the most frequent pair of the segmentation the merged tokenizer actually reaches.

Why old text keeps its ids: BPE applies the applicable merge of lowest rank first. The new merges rank after
every source merge, so a word is first segmented exactly as before; only then can a new merge fire, and only on a
pair it names. With the default filter every new piece holds a byte >= 0x80, so no pair of pieces of ASCII text
(English, code) forms one, and such text keeps every id. ``allow_ascii`` lifts the filter. A pair whose
concatenation is already a source piece is never merged (one string, one id).

Deterministic: ties go to the smaller pair (by its two strings), so the same inputs give the same merges.
"""
from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from typing import Callable

from data_tools.vocab_merge.source import pinned_vocab


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, the one the ``tokenizers`` ByteLevel pre-tokenizer uses."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs = bs[:]
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_OF = {c: b for b, c in _bytes_to_unicode().items()}


def piece_bytes(piece: str) -> bytes:
    """The bytes a byte-level piece stands for."""
    return bytes(BYTE_OF[c] for c in piece)


def has_non_ascii(piece: str) -> bool:
    return any(BYTE_OF.get(c, 0x80) >= 0x80 for c in piece)


def word_counts(backend, lines: list[str]) -> Counter:
    """{tuple of the source's pieces: occurrences} over the pre-tokenized words of ``lines``."""
    words: Counter = Counter()
    for line in lines:
        text = backend.normalizer.normalize_str(line) if backend.normalizer is not None else line
        words.update(w for w, _ in backend.pre_tokenizer.pre_tokenize_str(text))
    model = backend.model
    return Counter({tuple(t.value for t in model.tokenize(w)): n for w, n in words.items()})


def learn_merges(words: Counter, known: set[str], add: int, keep: Callable[[str], bool],
                 min_count: int = 2) -> list[tuple[str, str]]:
    """Up to ``add`` merges continuing BPE on ``words`` ({piece tuple: count}); ``known`` holds the source's
    pieces (and grows with the new ones). A pair is merged only if its piece is new and ``keep(piece)``."""
    syms = [list(w) for w in words]
    freq = list(words.values())
    counts: Counter = Counter()
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, s in enumerate(syms):
        for pair in zip(s, s[1:]):
            counts[pair] += freq[i]
            where[pair].add(i)
    heap = [(-c, pair) for pair, c in counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    blocked: set[tuple[str, str]] = set()
    while len(merges) < add and heap:
        c, pair = heapq.heappop(heap)
        if -c != counts.get(pair, 0) or pair in blocked:
            continue  # a stale heap entry: the pair's count changed since it was pushed
        if -c < min_count:
            break
        piece = pair[0] + pair[1]
        if piece in known or not keep(piece):
            blocked.add(pair)
            continue
        known.add(piece)
        merges.append(pair)
        changed = set()
        for i in where.pop(pair):
            s = syms[i]
            for q in zip(s, s[1:]):
                counts[q] -= freq[i]
                changed.add(q)
            s = syms[i] = _merge(s, pair, piece)
            for q in zip(s, s[1:]):
                counts[q] += freq[i]
                where[q].add(i)
                changed.add(q)
        del counts[pair]
        for q in changed:
            if counts.get(q, 0) > 0 and q != pair:
                heapq.heappush(heap, (-counts[q], q))
    return merges


def _merge(s: list[str], pair: tuple[str, str], piece: str) -> list[str]:
    """Left to right, as BPE applies one merge to a word (``aaa`` with ``a a`` -> ``aa a``)."""
    out, i = [], 0
    while i < len(s):
        if i + 1 < len(s) and s[i] == pair[0] and s[i + 1] == pair[1]:
            out.append(piece)
            i += 2
        else:
            out.append(s[i])
            i += 1
    return out


def extend(source, lines: list[str], add: int, allow_ascii: bool) -> tuple[dict, list[str]]:
    """(the merged tokenizer.json as a dict, the new pieces in id order) for a byte-level BPE ``source``."""
    backend = source.tok.backend_tokenizer
    known = set(source.tok.get_vocab())
    merges = learn_merges(word_counts(backend, lines), known, add, (lambda p: True) if allow_ascii else has_non_ascii)
    merged = dict(source.backend)
    model = merged["model"] = dict(source.backend["model"])
    model["vocab"] = pinned_vocab(source.backend)
    pieces = [a + b for a, b in merges]
    for i, piece in enumerate(pieces):
        model["vocab"][piece] = source.size + i
    as_strings = bool(model["merges"]) and isinstance(model["merges"][0], str)  # older tokenizer.json: "a b"
    model["merges"] = list(model["merges"]) + [f"{a} {b}" if as_strings else [a, b] for a, b in merges]
    return merged, pieces
