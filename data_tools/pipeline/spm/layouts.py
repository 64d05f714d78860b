"""The special-token layouts of the source model families a target SentencePiece model mirrors, and its model
types: the choices of ``PrepareOptions`` and what the trainer trains with, in a leaf both import."""
from __future__ import annotations

LAYOUTS = {
    "roberta": dict(bos_id=0, pad_id=1, eos_id=2, unk_id=3, bos_piece="<s>", pad_piece="<pad>", eos_piece="</s>",
                    unk_piece="<unk>", user_defined_symbols=["<mask>"]),
    "bert": dict(pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="[PAD]", unk_piece="[UNK]", bos_piece="[CLS]",
                 eos_piece="[SEP]", user_defined_symbols=["[MASK]"]),
}
MODEL_TYPES = ("unigram", "bpe")
