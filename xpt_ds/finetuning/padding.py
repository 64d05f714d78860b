"""The id fine-tuning pads batches with (``pad_with``), and for a decoder's sentence tasks one that no row ends in
(``pad_no_row_ends_in``): a decoder's sequence head (transformers' ``*ForSequenceClassification``) reads a row at its
rightmost piece that is not its config's ``pad_token_id``, so a row whose own last piece is that id is read a piece
early."""
from __future__ import annotations

import logging

from xpt_ds.finetuning.data import FinetuneError

log = logging.getLogger("xpt_ds.cli.finetune")


def pad_with(tokenizer, causal: bool, model: str) -> int:
    """The id batches are padded with. A decoder's tokenizer often has no pad token (Llama 3, Mistral, GPT-2):
    it pads with its eos token, as transformers' own recipes do; the attention mask hides the padding either
    way. An encoder without one pads with id 0, masked out too."""
    if tokenizer.pad_token_id is not None:
        return tokenizer.pad_token_id
    if not causal:
        return 0
    if tokenizer.eos_token_id is None:
        raise FinetuneError(f"--model {model}: its tokenizer has neither a pad nor an eos token to pad batches with")
    log.info("the tokenizer of %s has no pad token: batches are padded with its eos token %r (id %d)", model,
             tokenizer.eos_token, tokenizer.eos_token_id)
    tokenizer.pad_token = tokenizer.eos_token  # saved with the fine-tuned model (save_model), so it pads the same
    return tokenizer.pad_token_id


def pad_no_row_ends_in(tokenizer, pad_id: int, rows: list[list[int]], model: str) -> int:
    """``pad_id``, or where some row ends in it (a text that ends in the eos token a decoder pads with), another of
    the tokenizer's special tokens that ends no row, made its pad token: a decoder's sequence head would otherwise
    read such a row at the piece before its last, the eos token itself taken for padding. The tokenizer and config
    ``--save-model`` saves keep it, so stock inference finds the same last pieces. Where every special token ends
    some row (GPT-2's one ``<|endoftext|>``), ``pad_id`` stays, and a warning says what those rows are read at."""
    ends = {ids[-1] for ids in rows if ids}
    if pad_id not in ends:
        return pad_id
    early = sum(1 for ids in rows if ids and ids[-1] == pad_id)
    name = tokenizer.convert_ids_to_tokens(pad_id)
    free = [i for i in tokenizer.all_special_ids if i not in ends]
    if not free:
        log.warning("%d rows end in %r, the token batches are padded with, and the tokenizer of %s has no other "
                    "special token to pad with: a decoder's sequence head reads those rows at the piece before it",
                    early, name, model)
        return pad_id
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(free[0])
    log.info("%d rows end in %r: batches are padded with %r (id %d) instead, so that a decoder's sequence head reads "
             "them at that last piece, not the one before", early, name, tokenizer.pad_token, free[0])
    return free[0]
