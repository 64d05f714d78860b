"""Loader throughput: xpt_ds's MLM stream vs. the Hugging Face DataCollatorForLanguageModeling path.

Both read the same WebDataset shards and produce masked [B, L] tensors (15 %, 80/10/10):
- xpt_ds: read shard -> decode -> pack -> mask -> tensors (``MLMBatchStream``), with 0 and N DataLoader workers,
  for each ``data.masking`` (token, whole_word, span); with ``--mix W``, also token masking over the shards as two
  corpora, the second blended in at weight W (``data.mix``);
- Hugging Face: read shard -> decode -> concatenate and chunk (``run_mlm.py``'s group_texts) ->
  ``DataCollatorForLanguageModeling`` on lists of ids, the usual ``Trainer`` input path; for whole words the same
  collator with ``whole_word_mask=True`` (transformers 5's whole-word path, which replaced
  DataCollatorForWholeWordMask), whose examples also carry each piece's character offsets (the tokenizer's
  ``offset_mapping``, made here from the pieces' lengths: a ``▁`` piece starts after a gap), as it needs.

    python benchmarks/bench_loader.py [--tokens 6000000] [--batch 64] [--seq-len 512] [--repeats 1] [--mix 0.1]
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


def best_rate(next_batch, batch, seq_len, n_batches, repeats) -> tuple[float, float]:
    """Tokens per wall-clock second and per CPU second of this process, each of the fastest of ``repeats``
    consecutive windows of ``n_batches`` batches: on a shared machine the slower windows measure the other jobs, and
    CPU time (this process only, so not DataLoader workers') does not count the time the others took."""
    wall = cpu = 0.0
    tokens = n_batches * batch * seq_len
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n_batches):
            out = next_batch()
        wall = max(wall, tokens / (time.perf_counter() - t0))
        cpu = max(cpu, tokens / (time.process_time() - c0))
    assert out["input_ids"].shape == (batch, seq_len)
    return wall, cpu


def bench_xpt(shards, tok, batch, seq_len, workers, n_batches, masking: str = "token",
              repeats: int = 1, mix: float = 0.0) -> tuple[float, float]:
    """``mix``: the shards' second half is a corpus blended in at that weight (``data.mix``), the first half
    data.train_shards."""
    from xpt_ds.config import DataConfig
    from xpt_ds.data.mixture import MAIN, Mixture
    from xpt_ds.data.mlm import MLMBatchStream, MLMMasker, build_stream

    cfg = DataConfig(train_shards=shards, seq_len=seq_len, num_workers=workers, masking=masking)
    mixture = None
    if mix:
        half = len(shards) // 2
        corpora = [build_stream(shards[:half], cfg, tok), build_stream(shards[half:], cfg, tok)]
        mixture = Mixture([MAIN, "mixed"], corpora, [1 - mix, mix])
    stream = MLMBatchStream(mixture.streams[0] if mix else build_stream(shards, cfg, tok), MLMMasker(cfg, tok), batch,
                            0, 1, workers, mixture=mixture)
    next(stream)  # start-up (worker fork, index scan) is not throughput
    rate = best_rate(lambda: next(stream), batch, seq_len, n_batches, repeats)
    stream.close()
    return rate


def piece_spans(hf_tok) -> tuple[np.ndarray, np.ndarray]:
    """Per id: (the gap before the piece, its characters) as a fast tokenizer's ``offset_mapping`` reflects them: a
    ``▁`` piece starts one character (the space) after the previous piece's end; special pieces are (0, 0)."""
    pieces = hf_tok.convert_ids_to_tokens(list(range(len(hf_tok))))
    special = set(hf_tok.all_special_ids)
    gap = np.array([0 if i in special else int(p.startswith("▁")) for i, p in enumerate(pieces)])
    length = np.array([0 if i in special else len(p) for i, p in enumerate(pieces)])
    return gap, length


def piece_offsets(spans: tuple[np.ndarray, np.ndarray], ids: np.ndarray) -> list[tuple[int, int]]:
    """``offset_mapping`` of one document's ids (what ``tokenizer(text, return_offsets_mapping=True)`` stores)."""
    gap, length = spans[0][ids], spans[1][ids]
    ends = np.cumsum(length)
    return list(zip((ends - length + gap).tolist(), ends.tolist()))


def bench_hf(shards, hf_tok, batch, seq_len, n_batches, whole_word: bool = False,
             repeats: int = 1) -> tuple[float, float]:
    from transformers import DataCollatorForLanguageModeling

    from xpt_ds.data.shards import DocReader, scan_shard

    collator = DataCollatorForLanguageModeling(tokenizer=hf_tok, mlm=True, mlm_probability=0.15,
                                               whole_word_mask=whole_word, return_tensors="pt")
    body = seq_len - 2
    spans = piece_spans(hf_tok) if whole_word else None

    def examples():
        buf: list[int] = []
        offsets: list[tuple[int, int]] = []
        for path in shards:
            idx = scan_shard(path)
            reader = DocReader([idx])
            for d in range(len(idx.lengths)):
                ids = np.append(reader.read(0, d), hf_tok.sep_token_id)
                buf += ids.tolist()  # tokenized text, as datasets holds it
                if whole_word:  # tokenized with return_offsets_mapping=True
                    offsets += piece_offsets(spans, ids)
                while len(buf) >= body:  # group_texts
                    ex = {"input_ids": [hf_tok.cls_token_id] + buf[:body] + [hf_tok.sep_token_id]}
                    if whole_word:
                        ex["offset_mapping"] = [(0, 0)] + offsets[:body] + [(0, 0)]
                        offsets = offsets[body:]
                    yield ex
                    buf = buf[body:]

    it = examples()
    collator([next(it) for _ in range(batch)])
    return best_rate(lambda: collator([next(it) for _ in range(batch)]), batch, seq_len, n_batches, repeats)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=6_000_000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1, help="timed windows per row; the fastest counts")
    p.add_argument("--masking", nargs="+", default=["token", "whole_word", "span"], help="data.masking strategies")
    p.add_argument("--spm", help="SentencePiece model (default: train a small one on synthetic text)")
    p.add_argument("--mix", type=float, default=0.0, help="also time token masking with half the shards blended in "
                                                           "at this weight (data.mix)")
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
        hf = {"token": bench_hf(shards, hf_tok, a.batch, a.seq_len, a.batches, repeats=a.repeats),
              "whole_word": bench_hf(shards, hf_tok, a.batch, a.seq_len, a.batches, True, a.repeats)}
        rows = [("HF DataCollatorForLanguageModeling", "token", hf["token"]),
                ("HF DataCollatorForLanguageModeling(whole_word_mask=True)", "whole_word", hf["whole_word"])]
        for masking in a.masking:
            for workers in (0, a.workers):
                rows.append((f"xpt_ds MLMBatchStream, {workers} workers", masking,
                             bench_xpt(shards, tok, a.batch, a.seq_len, workers, a.batches, masking, a.repeats)))
        for workers in (0, a.workers) if a.mix else ():
            rows.append((f"xpt_ds MLMBatchStream, data.mix {a.mix:g}, {workers} workers", "token",
                         bench_xpt(shards, tok, a.batch, a.seq_len, workers, a.batches, "token", a.repeats, a.mix)))
    import transformers
    print(f"machine: {platform.node()} {os.cpu_count()} CPUs, torch {torch.__version__}, transformers "
          f"{transformers.__version__}; batch {a.batch} x {a.seq_len}, best of {a.repeats} windows of {a.batches} "
          "batches")
    print("| loader | masking | tokens/s | vs HF token | vs HF whole-word | tokens/CPU-s | vs HF token | "
          "vs HF whole-word |\n|---|---|---:|---:|---:|---:|---:|---:|")
    for name, masking, (wall, cpu) in rows:
        line = f"| {name} | {masking} | {wall / 1e6:.2f}M | {wall / hf['token'][0]:.1f}x | "
        line += f"{wall / hf['whole_word'][0]:.1f}x | "
        if "0 workers" in name or name.startswith("HF"):  # one process: its CPU time is all the work
            line += f"{cpu / 1e6:.2f}M | {cpu / hf['token'][1]:.1f}x | {cpu / hf['whole_word'][1]:.1f}x |"
        else:
            line += "n/a | | |"
        print(line)


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
