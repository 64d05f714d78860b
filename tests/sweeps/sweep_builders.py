"""What the sweep tests share: ``result_rows``, the rows of a sweep's results.jsonl; ``decoder_source``, a tiny
decoder source with a tokenizer of its own, and ``ENGLISH``, the text it was trained on."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

ENGLISH = ["the cat sat on the mat", "a dog ran to the park and sat down", "the end of the day came at last",
           "she read the book by the window", "we walk home after the rain"]


def result_rows(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def decoder_source(model_dir: Path, out: Path) -> Path:
    """A copy of the tiny decoder ``model_dir`` (conftest's ``tiny_decoder``, 120 rows, bos 0, pad 1, eos 2) with
    a Hugging Face tokenizer of its own, so that ``evaluate --text`` can score the source itself: a BPE of at most
    80 pieces over whitespace-split ``ENGLISH``, its specials <s> <pad> </s> <unk> first (ids 0-3)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    shutil.copytree(model_dir, out)
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe.train_from_iterator(ENGLISH * 5, trainers.BpeTrainer(vocab_size=80, special_tokens=["<s>", "<pad>", "</s>",
                                                                                            "<unk>"]))
    PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(str(out))
    return out
