"""Tiny GGUF files written with the gguf package, for the tests of .gguf sources: a Llama of 10 pieces (a
SmolLM2-like byte-level BPE vocabulary, its special tokens as the caller states them), with or without weights."""
from __future__ import annotations

from pathlib import Path

TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "a", "b", "ab", "Ġ", "Ġa", "c"]


def write_gguf(path: Path, bos: int = 1, eos: int = 2, pad: int | None = 2, unk: int = 0,
               weights: bool = False, big_endian: bool = False) -> Path:
    """A llama GGUF at ``path``: hidden 8, one layer, 2 heads (1 kv), FFN 16, tied head; ``weights``: every
    tensor (N(0, 0.1), seed 0; else only the embedding, enough for the tokenizer); ``big_endian``: written in
    that byte order."""
    import gguf
    import numpy as np

    d, ff, heads, kv = 8, 16, 2, 1
    w = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(TOKENS)
    w.add_token_types([3, 3, 3, 3, 1, 1, 1, 1, 1, 1])  # 3: control (special)
    w.add_token_merges(["a b", "Ġ a"])
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    if pad is not None:
        w.add_pad_token_id(pad)
    w.add_unk_token_id(unk)
    g = np.random.default_rng(0)

    def normal(*shape):
        return (g.standard_normal(shape) * 0.1).astype(np.float32)

    w.add_tensor("token_embd.weight", normal(len(TOKENS), d))
    if weights:
        hd, ones = d // heads, np.ones(d, np.float32)
        w.add_tensor("output_norm.weight", ones)
        for name, value in [("attn_norm", ones), ("ffn_norm", ones), ("attn_q", normal(d, d)),
                            ("attn_k", normal(kv * hd, d)), ("attn_v", normal(kv * hd, d)),
                            ("attn_output", normal(d, d)), ("ffn_gate", normal(ff, d)), ("ffn_up", normal(ff, d)),
                            ("ffn_down", normal(d, ff))]:
            w.add_tensor(f"blk.0.{name}.weight", value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
