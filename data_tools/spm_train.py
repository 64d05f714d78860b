"""Train a target SentencePiece model with the special-token layout of the source model family.

The trainer reads pad/bos(cls)/eos(sep)/unk ids from the model and looks up the mask piece, so either
layout works; matching the family keeps the conventional ids (RoBERTa: <s>=0 <pad>=1 </s>=2 <unk>=3).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import sentencepiece as spm

LAYOUTS = {
    "roberta": dict(bos_id=0, pad_id=1, eos_id=2, unk_id=3, bos_piece="<s>", pad_piece="<pad>", eos_piece="</s>",
                    unk_piece="<unk>", user_defined_symbols=["<mask>"]),
    "bert": dict(pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="[PAD]", unk_piece="[UNK]", bos_piece="[CLS]",
                 eos_piece="[SEP]", user_defined_symbols=["[MASK]"]),
}


def train_spm(text_file: Path, out_prefix: Path, vocab_size: int, family: str = "roberta",
              model_type: str = "unigram", input_sentence_size: int = 2_000_000, seed: int = 0) -> Path:
    if family not in LAYOUTS:
        raise ValueError(f"unknown family '{family}' (valid: {', '.join(LAYOUTS)})")
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=str(text_file), model_prefix=str(out_prefix), vocab_size=vocab_size, model_type=model_type,
        character_coverage=0.9995, input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
        seed_sentencepiece_size=1_000_000, num_threads=2, minloglevel=2, **LAYOUTS[family])
    return out_prefix.with_suffix(".model")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--input", required=True, type=Path, help="one sentence per line")
    p.add_argument("--out", required=True, type=Path, help="output prefix (writes PREFIX.model/.vocab)")
    p.add_argument("--vocab-size", type=int, default=50_000)
    p.add_argument("--family", default="roberta", choices=sorted(LAYOUTS))
    p.add_argument("--model-type", default="unigram", choices=["unigram", "bpe"])
    a = p.parse_args()
    print(train_spm(a.input, a.out, a.vocab_size, a.family, a.model_type))


if __name__ == "__main__":
    main()
