"""Loader throughput: xpt_ds's MLM stream vs. the Hugging Face DataCollatorForLanguageModeling path.

Both read the same WebDataset shards and produce masked [B, L] tensors (15 %, 80/10/10):
- xpt_ds: read shard -> decode -> pack -> mask -> tensors (``MLMBatchStream``), with 0 and N DataLoader workers;
- Hugging Face: read shard -> decode -> concatenate and chunk (``run_mlm.py``'s group_texts) ->
  ``DataCollatorForLanguageModeling`` on lists of ids, the usual ``Trainer`` input path.

    python benchmarks/bench_loader.py [--tokens 6000000] [--batch 64] [--seq-len 512]
"""
from __future__ import annotations

import argparse
import io
import os
import platform
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def write_shards(out: Path, tokens: int, vocab: int, n_shards: int = 8, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    paths, per_shard = [], tokens // n_shards
    for s in range(n_shards):
        path = out / f"bench-{s:06d}.tar"
        with tarfile.open(path, "w") as tar:
            left, d = per_shard, 0
            while left > 0:
                n = int(min(left, rng.integers(50, 2000)))
                buf = io.BytesIO()
                np.save(buf, rng.integers(5, vocab, n, dtype=np.uint16))
                info = tarfile.TarInfo(f"bench-{s:06d}-{d:08d}.ids.npy")
                info.size = buf.tell()
                buf.seek(0)
                tar.addfile(info, buf)
                left, d = left - n, d + 1
        paths.append(str(path))
    return paths


def bench_xpt(shards, tok, batch, seq_len, workers, n_batches) -> float:
    from xpt_ds.config import DataConfig
    from xpt_ds.data.mlm import MLMBatchStream, MLMMasker, build_stream

    cfg = DataConfig(train_shards=shards, seq_len=seq_len, num_workers=workers)
    stream = MLMBatchStream(build_stream(shards, cfg, tok), MLMMasker(cfg, tok), batch, 0, 1, workers)
    next(stream)  # start-up (worker fork, index scan) is not throughput
    t0 = time.perf_counter()
    for _ in range(n_batches):
        out = next(stream)
    assert out["input_ids"].shape == (batch, seq_len)
    return n_batches * batch * seq_len / (time.perf_counter() - t0)


def bench_hf(shards, hf_tok, batch, seq_len, n_batches) -> float:
    from transformers import DataCollatorForLanguageModeling

    from xpt_ds.data.shards import DocReader, scan_shard

    collator = DataCollatorForLanguageModeling(tokenizer=hf_tok, mlm=True, mlm_probability=0.15,
                                               return_tensors="pt")
    body = seq_len - 2

    def examples():
        buf: list[int] = []
        for path in shards:
            idx = scan_shard(path)
            reader = DocReader([idx])
            for d in range(len(idx.lengths)):
                buf += reader.read(0, d).tolist() + [hf_tok.sep_token_id]  # tokenized text, as datasets holds it
                while len(buf) >= body:  # group_texts
                    yield {"input_ids": [hf_tok.cls_token_id] + buf[:body] + [hf_tok.sep_token_id]}
                    buf = buf[body:]

    it = examples()
    collator([next(it) for _ in range(batch)])
    t0 = time.perf_counter()
    for _ in range(n_batches):
        out = collator([next(it) for _ in range(batch)])
    assert out["input_ids"].shape == (batch, seq_len)
    return n_batches * batch * seq_len / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=6_000_000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--spm", help="SentencePiece model (default: train a small one on synthetic text)")
    a = p.parse_args()

    from xpt_ds.data.tokenizer import build_tokenizer, save_hf_tokenizer
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        spm_path = a.spm or _small_spm(tmp)
        tok = build_tokenizer(spm_path)
        save_hf_tokenizer(tok, tmp / "hf", model_max_length=a.seq_len, token_types=1)  # RoBERTa: ids + mask only
        hf_tok = AutoTokenizer.from_pretrained(tmp / "hf")
        shards = write_shards(tmp, a.tokens, tok.vocab_size)
        torch.set_num_threads(1)
        rows = [("HF DataCollatorForLanguageModeling", bench_hf(shards, hf_tok, a.batch, a.seq_len, a.batches))]
        rows.append(("xpt_ds MLMBatchStream, 0 workers", bench_xpt(shards, tok, a.batch, a.seq_len, 0, a.batches)))
        rows.append((f"xpt_ds MLMBatchStream, {a.workers} workers",
                     bench_xpt(shards, tok, a.batch, a.seq_len, a.workers, a.batches)))
    base = rows[0][1]
    print(f"machine: {platform.node()} {os.cpu_count()} CPUs, torch {torch.__version__}; "
          f"batch {a.batch} x {a.seq_len}, {a.batches} batches")
    print("| loader | tokens/s | vs HF |\n|---|---:|---:|")
    for name, tps in rows:
        print(f"| {name} | {tps / 1e6:.2f}M | {tps / base:.1f}x |")


def _small_spm(tmp: Path) -> str:
    import sentencepiece as spm
    rng = np.random.default_rng(0)
    syll = [chr(0xAC00 + i) for i in rng.choice(11172, 400, replace=False)]
    text = "\n".join(" ".join("".join(rng.choice(syll, 2)) for _ in range(12)) for _ in range(20000))
    (tmp / "text.txt").write_text(text, encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(tmp / "text.txt"), model_prefix=str(tmp / "spm"), vocab_size=8000,
                                   bos_id=0, pad_id=1, eos_id=2, unk_id=3, user_defined_symbols=["<mask>"],
                                   minloglevel=2, num_threads=2)
    return str(tmp / "spm.model")


if __name__ == "__main__":
    main()
