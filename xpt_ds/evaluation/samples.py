"""A decoder's sampled continuations of held-out text, for the evaluation report (``xpt-ds evaluate``).

Prompts are the first ``prompt_pieces`` pieces of the first documents of the shards (in the order the shards
list them), read as an exported model reads text: ``<s>`` then the pieces. Continuations are nucleus samples
(top-p 0.9) from a generator seeded per prompt, so a rerun on the same model gives the same text. Figures tell
how good a model is; the samples show what it writes.
"""
from __future__ import annotations

import torch

from xpt_ds.data.manifest import expand_shards
from xpt_ds.data.shards import DocReader, scan_shards
from xpt_ds.data.tokenizer import TargetTokenizer


def held_out_prompts(shards: list[str], tok: TargetTokenizer, count: int, prompt_pieces: int,
                     on_corrupt: str = "fail") -> list[list[int]]:
    """The first ``prompt_pieces`` ids of each of the first ``count`` documents with at least that many."""
    indexes, _ = scan_shards(expand_shards(shards, tok), on_corrupt, vocab=(tok.vocab_size, tok.path),
                             forbidden=tok.not_in_shards)
    reader, prompts = DocReader(indexes), []
    try:
        for shard, index in enumerate(indexes):
            for doc, length in enumerate(index.lengths):
                if len(prompts) == count:
                    return prompts
                if length >= prompt_pieces:
                    prompts.append(reader.read(shard, doc, 0, prompt_pieces).astype(int).tolist())
    finally:
        reader.close()
    return prompts


@torch.no_grad()
def sample_continuations(model, tok: TargetTokenizer, prompts: list[list[int]], new_pieces: int = 24,
                         seed: int = 0, device: str = "cpu") -> list[dict]:
    """[{prompt, continuation}] as text: ``new_pieces`` sampled pieces after each prompt, stopping at ``</s>``."""
    model = model.to(device).eval()
    out = []
    for i, ids in enumerate(prompts):
        with torch.random.fork_rng(devices=[device] if device != "cpu" else []):
            torch.manual_seed(seed + i)
            x = torch.tensor([[tok.cls_id, *ids]], device=device)
            y = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=new_pieces,
                               do_sample=True, top_p=0.9, top_k=0, pad_token_id=tok.pad_id,
                               eos_token_id=tok.sep_id)
        new = [t for t in y[0, x.shape[1]:].tolist() if t not in (tok.sep_id, tok.pad_id)]
        out.append({"prompt": tok.decode(ids), "continuation": tok.decode(new)})
    return out
