"""Decoder rows of benchmarks/bench_throughput.py (``--decoder SHAPE``): the XPT target of a Llama-layout source
with random bf16 weights, and packed rows of several documents each.

- Sources (``DECODER_SHAPES``): ``1b`` is Llama-3.2-1B's config (benchmarks/bench_build.py's), ``135m`` is
  SmolLM2-135M's, ``tiny`` keeps the script working on the CPU (tests/benchmarks/test_bench_throughput.py). The
  target has L + 2 layers (the ITLs) and its own 32,000-piece vocabulary (tiny: 1,000), its head tied to the
  embeddings as the source's is.
- Rows (``decoder_batches``): ``seq_len`` tokens each, documents of geometric length (mean ``MEAN_DOCUMENT``
  tokens) separated by the target's sep, made into the trainer's next-token batch by ``xpt_ds.data.causal`` (cls
  at each document's start, position ids restarting there, every next token a target).
- HF ``Trainer`` peers on the same model and rows (``hf_samples``): ``input_ids`` with ``labels`` = ``input_ids``
  (the model shifts them), as ``run_clm`` packs text: plain causal attention across documents. The ``docpos``
  variant adds the per-document ``position_ids`` (``DataCollatorWithFlattening``'s rows), which transformers turns
  into the same dense block-diagonal mask as xpt_ds's ``sdpa``. Both run with ``use_cache=False`` (without it, a
  training forward fills a KV cache, and transformers ignores the restarts when a cache is given).
"""
from __future__ import annotations

from pathlib import Path

from bench_build import LLAMA_32, SHAPES, write_llama

MEAN_DOCUMENT = 512  # tokens: the mean length of a synthetic document
TARGET_VOCAB = {"1b": 32000, "135m": 32000, "tiny": 1000}
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                    rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                    initializer_range=0.02, hidden_act="silu")
DECODER_SHAPES = {
    "1b": {**LLAMA_32, **SHAPES["1b"]},
    "135m": SMOLLM2_135M,
    "tiny": dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, tie_word_embeddings=True,
                 bos_token_id=0, eos_token_id=2, hidden_act="silu"),
}
HF_ONLY = {"docpos": {"positions": "documents"}}  # --hf-variants that are no engine setting


def write_decoder_source(out: Path, shape: str) -> Path:
    return write_llama(out, DECODER_SHAPES[shape])


def decoder_tokenizer(shape: str):
    """The target vocabulary's size and special ids; the model build reads nothing else (no SentencePiece file)."""
    from xpt_ds.data.tokenizer import TargetTokenizer

    return TargetTokenizer(path="", vocab_size=TARGET_VOCAB[shape], pad_id=1, cls_id=0, sep_id=2, unk_id=3,
                           mask_id=4)


def decoder_batches(tok, micro_batch: int, seq_len: int, n: int = 4) -> list[dict]:
    """``n`` packed next-token batches in host memory (``xpt_ds.data.causal.NextTokenTargets``), each row
    ``cls`` + random pieces with a sep after each document + the row's closing sep."""
    import torch

    from xpt_ds.data.causal import NextTokenTargets

    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(max(tok.special_ids) + 1, tok.vocab_size, (micro_batch, seq_len), generator=g)
        ids[torch.rand(micro_batch, seq_len, generator=g) < 1 / MEAN_DOCUMENT] = tok.sep_id
        ids[:, 0], ids[:, -1] = tok.cls_id, tok.sep_id
        out.append(NextTokenTargets(tok)(ids, seeds=[]))
    return out


def hf_samples(batches: list[dict], positions: str) -> list[dict]:
    """The HF peer's samples from the same rows: ``labels`` = ``input_ids``; with ``positions="documents"`` also the
    per-document ``position_ids``."""
    samples = []
    for batch in batches:
        for i, ids in enumerate(batch["input_ids"]):
            sample = {"input_ids": ids, "labels": ids}
            if positions == "documents":
                sample["position_ids"] = batch["position_ids"][i]
            samples.append(sample)
    return samples


def documents_per_row(batches: list[dict]) -> float:
    return float(sum(int((b["position_ids"] == 0).sum()) for b in batches) / sum(len(b["input_ids"]) for b in batches))
