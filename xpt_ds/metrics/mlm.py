"""002 Table 2's intrinsic metrics on masked tokens: perplexity, Hits@1/3/5/10, MRR and MR.

The gold token's rank is 1 + the number of vocabulary entries scored strictly higher + half the number of
other entries scored the same: its expected rank when ties are broken at random, so a tie (common with bf16
logits) is neither a free hit nor a free miss. Hits@k counts rank <= k; MRR averages 1/rank; MR averages the
rank. Targets equal to ``IGNORE`` (unmasked or padding positions) do not count.

PPL is per piece, so it compares only models with the same vocabulary. Given each piece's character count
(``piece_chars``), ``MLMStats`` also reports bits per character: the masked pieces' summed NLL in bits over
the characters of their surface text, which compares models across vocabularies (003's two transfers); given
each piece's UTF-8 byte count (``piece_bytes``), bits per byte likewise. Given
which pieces start a word (``starts_word``) it reports bits per word (004 §3): the same NLL over the number of
masked word-initial pieces (``bits_per_word``).
"""
from __future__ import annotations

import math
import re
import unicodedata

import torch
import torch.nn.functional as F

IGNORE = -100
HITS_AT = (1, 3, 5, 10)
_FIELDS = ("nll", "tokens", "rr", "rank", *(f"hits@{k}" for k in HITS_AT), "chars", "words", "bytes")
MARKER_STYLES = ("sentencepiece", "byte_level", "wordpiece")


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printable stand-in character -> the byte it shows ('Ġ' -> 0x20)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shown, extra = {}, 0
    for b in range(256):
        if b in keep:
            shown[chr(b)] = b
        else:
            shown[chr(256 + extra)] = b
            extra += 1
    return shown


_BYTES = _byte_decoder()


BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # SentencePiece byte fallback


def fallback_byte(piece: str) -> int | None:
    """The byte a SentencePiece byte-fallback piece ``<0xAB>`` stands for; None for any other piece."""
    m = BYTE_PIECE.match(piece)
    return int(m.group(1), 16) if m else None


def piece_chars(piece: str, style: str) -> int:
    """Characters of surface text that one vocabulary piece stands for: the denominator of bits per character.

    - ``sentencepiece`` (SentencePiece, and HF Metaspace tokenizers): the piece's text, with its word-start
      marker ``▁`` counted as the one space character it replaces, i.e. ``len(piece)``; a byte-fallback piece
      ``<0xAB>`` counts 1 if its byte starts a UTF-8 character, else 0 (not 6, the letters of its name, which
      would make bits per character far too low where text falls back to bytes).
    - ``byte_level`` (GPT-2/RoBERTa byte-level BPE): the piece's characters are stand-ins for bytes (``Ġ`` is the
      space); it counts the UTF-8 characters that *start* in the piece, so a character whose bytes are split
      over two pieces counts once, on the piece holding its first byte.
    - ``wordpiece`` (BERT): a continuation piece ``##xy`` counts ``xy``; a word-initial piece counts its text
      plus one space (the separator before the word), except a piece of punctuation alone, which counts its text:
      BERT splits punctuation off as a piece of its own, and it is mostly attached to a word in the text (``city.``,
      ``(city)``: the one space before the group is counted on the word's piece, as ``starts_word`` counts words).
      What it cannot see is off by one either way: a word piece after punctuation inside a word (``don't``,
      ``3.14``, ``e.g.``) still counts a space, and punctuation between spaces (``a - b``) counts none. Until
      2026-12-04 every punctuation piece also counted a space, about 4 % too
      many characters on UA-GEC's Ukrainian (97,159 characters, 101,071 counted), so bits per character and per
      byte came out too low for keep_vocab runs of BERT-family sources.
    """
    if style == "sentencepiece":
        byte = fallback_byte(piece)
        return len(piece) if byte is None else int(byte & 0xC0 != 0x80)
    if style == "byte_level":
        return sum(1 for c in piece if (_BYTES.get(c, 0x20) & 0xC0) != 0x80)  # not a UTF-8 continuation byte
    if style == "wordpiece":
        return len(piece) - 2 if piece.startswith("##") else len(piece) + _space_before(piece)
    raise ValueError(f"unknown marker style '{style}' (valid: {', '.join(MARKER_STYLES)})")


def piece_bytes(piece: str, style: str) -> int:
    """UTF-8 bytes of surface text that one vocabulary piece stands for: the denominator of bits per byte, which
    compares across vocabularies and with other models' published figures. As ``piece_chars``: SentencePiece's
    ``▁`` is the one space byte it replaces and a byte piece ``<0xAB>`` is one byte; a byte-level piece is one
    byte per character; a WordPiece ``##xy`` is ``xy``, a word-initial piece its text plus the space before it."""
    if style == "sentencepiece":
        if fallback_byte(piece) is not None:
            return 1
        return len(piece.replace("▁", " ").encode("utf-8"))
    if style == "byte_level":
        return len(piece)
    if style == "wordpiece":
        return len(piece[2:].encode("utf-8")) if piece.startswith("##") else \
            len(piece.encode("utf-8")) + _space_before(piece)
    raise ValueError(f"unknown marker style '{style}' (valid: {', '.join(MARKER_STYLES)})")


def piece_byte_lengths(tok) -> torch.Tensor:
    """[V] bytes of surface text per id (``piece_bytes``); special ids count 1, as in ``piece_char_lengths`` (a
    decoder's ``sep`` target, the end of a document, stands for the one separator byte between documents)."""
    style, special = tok.marker_style, set(tok.special_ids)
    return torch.tensor([1 if i in special else piece_bytes(tok.piece(i), style) for i in range(tok.vocab_size)],
                        dtype=torch.float64)


def piece_char_lengths(tok) -> torch.Tensor:
    """[V] characters of surface text per id (``piece_chars`` in a ``TargetTokenizer``'s marker style).
    Special ids count 1: of them only ``unk`` can be a target, and it stands for text the tokenizer could not
    encode, at least one character."""
    style, special = tok.marker_style, set(tok.special_ids)
    return torch.tensor([1 if i in special else piece_chars(tok.piece(i), style) for i in range(tok.vocab_size)],
                        dtype=torch.float64)


def _bert_punctuation(c: str) -> bool:
    """BERT's BasicTokenizer splits these off as pieces of their own (``_is_punctuation``)."""
    o = ord(c)
    return 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126 or unicodedata.category(c)[0] == "P"


def _space_before(piece: str) -> int:
    """The space a WordPiece word-initial piece stands for besides its text: one, unless it is punctuation alone
    (``piece_chars``)."""
    return int(not all(_bert_punctuation(c) for c in piece))


def starts_word(piece: str, style: str, split_punctuation: bool = False) -> bool:
    """Whether a vocabulary piece begins a word, a word being a whitespace-delimited run of text: the numerator
    of bits per word counts each word once, on its first piece. ``split_punctuation``: under ``wordpiece`` every
    piece that is not a ``##`` continuation begins a word, punctuation included (BERT's whole-word masking;
    ``xpt_ds.data.masking``); the other styles ignore it.

    - ``sentencepiece``: the piece starts with the marker ``▁`` (the dummy prefix gives a text's first word one).
    - ``byte_level``: the piece starts with ``Ġ`` (a space byte). A text's first word has no leading space (RoBERTa
      adds none), so it is not counted: a bias of one word per encoded text.
    - ``wordpiece``: not a ``##`` continuation and not punctuation only. BERT splits punctuation off before
      WordPiece, so ``city.`` is ``city`` ``.``; counting the ``.`` would make a word of it where the other
      styles (``▁city`` ``.``) do not. Punctuation standing between spaces is then missed instead, the rarer case.
    """
    if style == "sentencepiece":
        return piece.startswith("▁")
    if style == "byte_level":
        return piece.startswith("Ġ")
    if style == "wordpiece":
        return not piece.startswith("##") and (split_punctuation or bool(_space_before(piece)))
    raise ValueError(f"unknown marker style '{style}' (valid: {', '.join(MARKER_STYLES)})")


def piece_word_starts(tok, split_punctuation: bool = False) -> torch.Tensor:
    """[V] 1.0 where an id begins a word (``starts_word`` in a ``TargetTokenizer``'s marker style), else 0.0.
    Special ids count 0, except ``unk`` under WordPiece, which stands for a whole word BERT could not split."""
    style, special = tok.marker_style, set(tok.special_ids)
    return torch.tensor([float(style == "wordpiece" and i == tok.unk_id) if i in special
                         else float(starts_word(tok.piece(i), style, split_punctuation))
                         for i in range(tok.vocab_size)], dtype=torch.float64)


def gold_ranks(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[N, V] scores and [N] gold ids -> [N] float64 ranks (1 = best)."""
    gold = logits.gather(1, targets[:, None])
    higher = (logits > gold).sum(1, dtype=torch.float64)
    ties = (logits == gold).sum(1, dtype=torch.float64) - 1
    ranks = 1 + higher + ties / 2
    # a NaN gold score compares false with everything: rank it last, not first (hits@1 1.0, MRR 2.0 otherwise)
    return torch.where(gold[:, 0].isnan(), torch.full_like(ranks, logits.shape[1]), ranks)


def scored_batch(b: int, max_batches: int, rank: int, world: int) -> bool | None:
    """Whether a rank scores the ``b``-th validation micro-batch it is dealt, which is global micro-batch
    b·world + rank (the validation streams deal them so): only the first ``max_batches`` global micro-batches
    count, whatever the number of ranks, so the trainer scores the sequences ``evaluate --run --max-batches``
    scores in one process. None: no rank has one of them left (stop). False: score nothing, but run the
    forward (collective under ZeRO-3), as every rank does the same number of batches. ``max_batches`` 0: all."""
    if not max_batches:
        return True
    if b * world >= max_batches:
        return None
    return b * world + rank < max_batches


class MLMStats:
    """Sums over batches (and ranks: ``all_reduce``) of everything the metrics need, on one device."""

    def __init__(self, device: torch.device | str = "cpu", char_lengths: torch.Tensor | None = None,
                 word_starts: torch.Tensor | None = None, byte_lengths: torch.Tensor | None = None):
        """``char_lengths``: [V] characters per vocabulary id (``piece_chars``); with it, ``result`` also has
        ``bits_per_char`` and ``chars``. ``word_starts``: [V] 1 for an id that begins a word
        (``piece_word_starts``); with it, ``bits_per_word`` and ``words``. ``byte_lengths``: [V] bytes per id
        (``piece_byte_lengths``); with it, ``bits_per_byte`` and ``bytes``."""
        self.sums = torch.zeros(len(_FIELDS), dtype=torch.float64, device=device)
        self.char_lengths = None if char_lengths is None else char_lengths.to(device, torch.float64)
        self.word_starts = None if word_starts is None else word_starts.to(device, torch.float64)
        self.byte_lengths = None if byte_lengths is None else byte_lengths.to(device, torch.float64)

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """logits [N, V] (or [B, T, V]) and targets [N] (or [B, T]); targets == IGNORE are skipped."""
        logits, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
        keep = targets != IGNORE
        logits, targets = logits[keep], targets[keep]
        ranks = gold_ranks(logits, targets)
        nll = F.cross_entropy(logits.float(), targets, reduction="sum").double()
        hits = [(ranks <= k).sum(dtype=torch.float64) for k in HITS_AT]
        chars = self.char_lengths[targets].sum() if self.char_lengths is not None else torch.zeros_like(nll)
        words = self.word_starts[targets].sum() if self.word_starts is not None else torch.zeros_like(nll)
        nbytes = self.byte_lengths[targets].sum() if self.byte_lengths is not None else torch.zeros_like(nll)
        self.sums += torch.stack([nll, torch.tensor(float(len(targets)), dtype=torch.float64, device=nll.device),
                                  ranks.reciprocal().sum(), ranks.sum(), *hits, chars, words, nbytes])

    def all_reduce(self) -> None:
        import deepspeed
        deepspeed.comm.all_reduce(self.sums)

    def result(self) -> dict[str, float]:
        s = dict(zip(_FIELDS, self.sums.tolist()))
        n = s["tokens"]
        if n == 0:
            return {"tokens": 0}
        loss = s["nll"] / n
        out = {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
        out.update({f"hits@{k}": s[f"hits@{k}"] / n for k in HITS_AT})
        out.update(mrr=s["rr"] / n, mr=s["rank"] / n, tokens=int(n))
        if self.char_lengths is not None:
            out.update(bits_per_char=bits_per_char(s["nll"], s["chars"]), chars=int(s["chars"]))
        if self.word_starts is not None:
            out.update(bits_per_word=bits_per_word(s["nll"], s["words"]), words=int(s["words"]))
        if self.byte_lengths is not None:
            out.update(bits_per_byte=bits_per_char(s["nll"], s["bytes"]), bytes=int(s["bytes"]))
        return out


def bits_per_char(nll_nats: float, chars: float) -> float:
    """Summed NLL (nats) of the masked pieces, in bits, per character of their surface text."""
    return nll_nats / math.log(2) / chars if chars else float("nan")


def bits_per_word(nll_nats: float, words: float) -> float:
    """Summed NLL (nats) of the masked pieces, in bits, per masked word-initial piece.

    Why this denominator. Pieces are masked independently (no whole-word masking), so a word is usually only
    partly masked and "NLL of the masked words" is not defined. Masking is uniform over pieces, so the masked
    pieces are a uniform sample of all pieces: the masked NLL sum estimates p x (the text's total NLL) and the
    masked word-initial pieces p x (its word count), each word having exactly one. Their ratio estimates bits
    per word of the text, each piece predicted from a context with ~15% of the pieces masked, in the same way
    ``bits_per_char`` estimates bits per character. A word count does not depend on the vocabulary, so, like
    ``bits_per_char``, it compares models across vocabularies on shards of the same text, and it equals
    bits_per_char x (characters per word). "Distinct words touched by a mask" would not: a vocabulary that cuts
    words into more pieces touches more words, each with a smaller share of its NLL.
    """
    return nll_nats / math.log(2) / words if words else float("nan")
