"""``subword_mean`` (EEVE, Kim et al. 2024; SambaLingo, Csaki et al. 2024): each target piece starts as the mean of
the source's input rows for the pieces the source tokenizer cuts that piece's text into.

A target piece's text is its surface with the word-start marker as a leading space: a SentencePiece ``▁при`` (the
target's spm model, or a Hugging Face tokenizer of that style) is `` при``; a byte-level ``Ġпри`` is decoded from
GPT-2's byte alphabet to the same bytes; a WordPiece ``##ри`` is a word-internal ``ри``; a SentencePiece byte piece
``<0xD0>`` is that byte. The source then encodes it as its own tokenizer would cut that text inside running text,
without special tokens:

- a word-initial piece: the text with a leading space, or without it when the source adds a word-start marker of
  its own to every text (Llama 2's SentencePiece dummy prefix, BERT's pre-tokenizer), so that both give ``▁при``
  / ``Ġпри`` / ``при``, never a stray ``▁`` token;
- a word-internal piece: the text as it is; where the source would prefix it as above, the source's tokenization
  model alone (``backend_tokenizer.model``: BPE or Unigram, past the prefix) on the text in the source's alphabet;
  for WordPiece, the text after the source's normaliser and pre-tokenizer as they would cut it after a word
  (``strategies.wordpiece_split``): the part they leave in that word takes the greedy longest match over the
  ``##`` tokens, as WordPiece continues a word, and every word they cut off (BERT's punctuation marks and CJK
  characters: ``),`` is ``)`` ``,``, ``中国`` is ``中`` ``国``) is cut as a word, never as ``##`` tokens that
  running text never holds;
- bytes that are not UTF-8 (part of a character: byte-level and byte-fallback vocabularies have such pieces): a
  byte-level source's model on those bytes in GPT-2's alphabet, a byte-fallback source's ``<0xNN>`` tokens; else
  no text.

The source's unk rows are left out of the mean (they say nothing about the text). A piece with no source tokens
left takes the fallback (``source_mean`` draws); one source token copies its row exactly (``copied``); several
give the float64 mean, cast to float32 (``combined``, the tokens in order as its sources). The target's
cls/sep/unk/mask rows are the source's special rows (``map_specials``). Ids are walked in order and nothing is
drawn but the fallback, so every rerun gives the same bits.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from xpt_ds.embedding_init.strategies import (
    _byte_decoder, fill_fallback, map_specials, source_surface, target_style, tokenizer_style, wordpiece_split)
from xpt_ds.metrics.mlm import fallback_byte

if TYPE_CHECKING:
    from xpt_ds.embedding_init.context import InitContext, Rows

def init_subword_mean(ctx: InitContext, rows: Rows) -> None:
    map_specials(ctx, rows)
    encoder = SourceEncoder(ctx.source_tokenizer, ctx.source_embeddings.shape[0])
    special, style = set(ctx.tok.special_ids), target_style(ctx.tok)
    todo = [i for i in rows.unset() if i not in special]
    surfaces = [target_bytes(ctx.pieces[i], style) for i in todo]
    for i, ids in zip(todo, encoder.encode_all(surfaces)):
        if len(ids) == 1:
            rows.copy(i, ids[0], encoder.token(ids[0]))
        elif ids:
            mean = ctx.source_embeddings[ids].double().mean(0).float()
            rows.set(i, mean, "combined", [encoder.token(j) for j in ids])
    fill_fallback(ctx, rows)


def target_bytes(piece: str, style: str) -> tuple[bool, bytes]:
    """(word-initial, the piece's text as UTF-8 bytes, the marker removed) of a target piece."""
    if style == "wordpiece":
        return (False, piece[2:].encode()) if piece.startswith("##") and len(piece) > 2 else (True, piece.encode())
    if style == "byte_level":
        dec = _byte_decoder()
        raw = bytes(dec[c] for c in piece) if all(c in dec for c in piece) else piece.encode()
    else:
        byte = fallback_byte(piece)
        raw = bytes([byte]) if byte is not None else piece.replace("▁", " ").encode()
    return (True, raw[1:]) if raw.startswith(b" ") else (False, raw)


class SourceEncoder:
    """Source token ids of a target piece's text (module docstring), within the source's embedding rows."""

    def __init__(self, stok, rows: int):
        self.stok, self.rows = stok, rows
        self.backend = stok.backend_tokenizer
        self.vocab = stok.get_vocab()
        self.style = tokenizer_style(stok)
        self.unk = {stok.unk_token_id} - {None}
        self.alphabet = {b: c for c, b in _byte_decoder().items()}  # byte -> GPT-2's stand-in character
        probe = stok.convert_ids_to_tokens(stok.encode("a", add_special_tokens=False))
        # True when the source marks "a" as a word start by itself (a dummy prefix; WordPiece: every word)
        self.prefixes = self.style == "wordpiece" or (bool(probe) and source_surface(probe[0], self.style)[0])

    def token(self, i: int) -> str:
        return self.stok.convert_ids_to_tokens(i)

    def encode_all(self, surfaces: list[tuple[bool, bytes]]) -> list[list[int]]:
        """Source ids per (word-initial, bytes), in order; texts the full tokenizer takes are encoded in one batch."""
        out: list[list[int] | None] = [None] * len(surfaces)
        batch: dict[int, str] = {}
        for k, (initial, raw) in enumerate(surfaces):
            text = _utf8(raw)
            if text is not None and text and (initial or not self.prefixes):
                batch[k] = text if (self.prefixes or not initial) else " " + text
            else:
                out[k] = self._model_ids(initial, raw, text)
        if batch:
            encoded = self.stok(list(batch.values()), add_special_tokens=False)["input_ids"]
            for k, ids in zip(batch, encoded):
                out[k] = ids
        return [[j for j in ids if j < self.rows and j not in self.unk] for ids in out]

    def _model_ids(self, initial: bool, raw: bytes, text: str | None) -> list[int]:
        """Ids where the full tokenizer would add a word start the piece does not have, or the bytes are no text."""
        if self.style == "byte_bpe":
            return self._tokenize("".join(self.alphabet[b] for b in (b" " if initial else b"") + raw))
        if text is None:  # part of a character: byte-fallback tokens, if the source has them
            pieces = (["▁"] if initial else []) + [f"<0x{b:02X}>" for b in raw]
            return [self.vocab[p] for p in pieces] if all(p in self.vocab for p in pieces) else []
        if self.style == "wordpiece":
            glued, words = wordpiece_split(self.backend, text)
            return self._continuation(glued) + [j for w in words for j in self._tokenize(w)]
        return self._tokenize(("▁" if initial else "") + text.replace(" ", "▁"))

    def _tokenize(self, sequence: str) -> list[int]:
        return [t.id for t in self.backend.model.tokenize(sequence)] if sequence else []

    def _continuation(self, text: str) -> list[int]:
        """WordPiece's greedy longest match of a word-internal, normalised ``text`` over the ``##`` tokens; no match
        at some point: [] (WordPiece makes the word unk)."""
        ids, start = [], 0
        while start < len(text):
            end = len(text)
            while end > start and f"##{text[start:end]}" not in self.vocab:
                end -= 1
            if end == start:
                return []
            ids.append(self.vocab[f"##{text[start:end]}"])
            start = end
        return ids


def _utf8(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
