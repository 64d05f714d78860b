"""What the fine-tuning tests share (test_finetune, test_finetune_diverged, and the GPU fine-tuning test):
``FAST`` settings, the ``Words`` sentence maker, ``split_files``/``write_jsonl`` for their JSONL files and a
byte-level BPE tokenizer; a LoRA classifier of a tiny decoder and one step of it under autocast."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


FAST = dict(lr=2e-3, batch_size=16, epochs=4, warmup_ratio=0.1, weight_decay=0.01)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


class Words:
    """Sentences of the corpus's own words (so the tokenizer knows them): four key words that are single
    pieces, and filler words that share no piece with them."""

    def __init__(self, corpus_text: Path, model: Path, seed: int = 0):
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(model)
        counts: dict[str, int] = {}
        for w in corpus_text.read_text(encoding="utf-8").replace(".", " ").split():
            counts[w] = counts.get(w, 0) + 1
        words = sorted(counts, key=lambda w: -counts[w])
        pieces = {w: tok.tokenize(w) for w in words}
        single = [w for w in words if len(pieces[w]) == 1]
        self.keys = single[:4]
        assert len(self.keys) == 4, "the corpus has too few single-piece words"
        key_pieces = {pieces[k][0] for k in self.keys}
        self.filler = [w for w in words if w not in self.keys and not key_pieces & set(pieces[w])][:40]
        self.rng = np.random.default_rng(seed)

    def sentence(self, *insert: str, lo: int = 4, hi: int = 8) -> list[str]:
        words = list(self.rng.choice(self.filler, self.rng.integers(lo, hi + 1)))
        for w in insert:
            words.insert(self.rng.integers(0, len(words) + 1), w)
        return words


def split_files(rows: list[dict], root: Path) -> dict[str, str]:
    """train / valid / test files of 60 % / 15 % / 25 % of ``rows``."""
    n = len(rows)
    cuts = {"train": rows[:int(0.6 * n)], "valid": rows[int(0.6 * n):int(0.75 * n)], "test": rows[int(0.75 * n):]}
    root.mkdir(parents=True, exist_ok=True)
    return {k: str(write_jsonl(root / f"{k}.jsonl", v)) for k, v in cuts.items()}


def key_word_rows(w: Words, n: int, flip: float | None = None) -> list[dict]:
    """Does the sentence (1-3 filler words) hold ``w``'s first key word? 35 % do; ``flip``: that share of the
    labels flipped (a second draw per row), so about 1 - flip is the best accuracy."""
    rows = []
    for _ in range(n):
        positive = w.rng.random() < 0.35
        label = positive if flip is None else positive != (w.rng.random() < flip)
        rows.append({"text": " ".join(w.sentence(*([w.keys[0]] if positive else []), lo=1, hi=3)),
                     "label": "yes" if label else "no"})
    return rows


def entity_rows(w: Words, n: int) -> list[dict]:
    """IOB2 rows: PER is one key word, LOC two key words in a row; each anywhere in a sentence, 60 % of them."""
    per, loc1, loc2 = w.keys[:3]
    rows = []
    for _ in range(n):
        tokens = list(w.sentence())
        tags = ["O"] * len(tokens)
        for words, labels in ([per], ["B-PER"]), ([loc1, loc2], ["B-LOC", "I-LOC"]):
            if w.rng.random() < 0.6:
                at = int(w.rng.integers(0, len(tokens) + 1))
                tokens[at:at], tags[at:at] = words, labels
        rows.append({"tokens": tokens, "tags": tags})
    return rows


def flags(settings: dict) -> list[str]:
    """``{"batch_size": 16, ...}`` as ``xpt_ds.cli.finetune``'s flags: ``--batch-size 16 ...``."""
    return [arg for k, v in settings.items() for arg in (f"--{k.replace('_', '-')}", str(v))]


def byte_level_tokenizer(text: list[str]):
    """A byte-level BPE tokenizer trained on ``text``, as GPT-2's, Llama 3's and SmolLM2's are: a word after a
    space is one piece with its space ("Ġcat")."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")


def lora_classifier(source, family: str, seed: int = 0):
    """A stock sequence classifier of the tiny ``source`` with rank-4 LoRA whose ``lora_B`` is not zero (a
    trained update), in fp32."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from xpt_ds.finetuning.lora import with_lora
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=3, pad_token_id=1,
                                                               dtype=torch.float32)
    with_lora(model, 4, 8.0, family)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.05)
    return model


def lora_step(model, ids, labels) -> tuple:
    """One forward and backward under bf16 autocast on the model's device: the logits and every trainable
    parameter's gradient."""
    import torch
    model.train()
    with torch.autocast(ids.device.type, dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    out.loss.backward()
    return out.logits.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
