"""Where does the source language go? (000 §4.4, Table 4; ``python -m xpt_ds.cli.probe``.)

Scores masked-token prediction (``xpt_ds.metrics.mlm``) on source-language text for the source model, and
for the post-trained model with the source vocabulary swapped back in: the source word embeddings (tied to
the LM-head decoder), the source LM-head bias and pad id, position rows shifted back to the source's layout;
once with the ITLs and once without. A model that kept the source vocabulary (keep_vocab) reads source text as it
is, so it is also scored with its own trained rows. With ``--target-shards`` it adds the post-trained model on
target text, in the tokenizer the checkpoint saved (SentencePiece, or keep_vocab's Hugging Face tokenizer). A
decoder source is probed on next-piece bits per byte instead (``xpt_ds.evaluation.decoder_probe``).
"""
from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from xpt_ds.config import ConfigError, DataConfig
from xpt_ds.config.methods import has_itl, method_of
from xpt_ds.data.manifest import expand_shards
from xpt_ds.data.mlm import MLMMasker, sequence_seed
from xpt_ds.data.tokenizer import build_hf_tokenizer, check_vocabulary
from xpt_ds.metrics.mlm import MLMStats, piece_word_starts
from xpt_ds.model.build import FAMILIES, load_source_model
from xpt_ds.model.decoder import is_decoder
from xpt_ds.model.forward.objective import MaskedLMObjective
from xpt_ds.model.skeleton import assign, skeleton


def swap_in_source_vocabulary(post: nn.Module, source: nn.Module, keep_itl: bool = True) -> nn.Module:
    """A copy of the post-trained ``post`` that reads and predicts the source vocabulary of ``source``."""
    family = FAMILIES[post.config.model_type]
    base = family.base
    cfg = copy.deepcopy(post.config)
    cfg.vocab_size, cfg.pad_token_id = source.config.vocab_size, source.config.pad_token_id
    cfg.bos_token_id, cfg.eos_token_id = source.config.bos_token_id, source.config.eos_token_id
    drop = has_itl(post.config) and not keep_itl
    if drop:
        cfg.num_hidden_layers -= 2
    model = skeleton(cfg)
    state, src_state = post.state_dict(), source.state_dict()
    out = {}
    for name, value in state.items():
        if ".word_embeddings." in name or name.endswith(("decoder.weight", "decoder.bias")) or name == family.head_bias:
            continue
        if drop and f"{base}.encoder.layer." in name:
            i = int(name.split(f"{base}.encoder.layer.")[1].split(".")[0])
            if i == 0 or i == post.config.num_hidden_layers - 1:
                continue  # ITL_in, ITL_out
            name = name.replace(f"encoder.layer.{i}.", f"encoder.layer.{i - 1}.", 1)
        out[name] = value
    word = f"{base}.embeddings.word_embeddings.weight"
    out[word] = src_state[word]
    out[family.head_bias] = src_state.get(family.head_bias, torch.zeros(cfg.vocab_size))
    pos = f"{base}.embeddings.position_embeddings.weight"
    shift = post.config.pad_token_id - source.config.pad_token_id if family.offset_positions else 0
    out[pos] = torch.roll(state[pos], -shift, dims=0)  # row r <- post row r + shift (wrapped rows are unused)
    missing = [n for n, _ in model.named_parameters() if n not in out]
    assert not missing, missing
    return assign(model, lambda n: out[n].detach().float().clone())


def source_batches(text: Path, tokenizer, seq_len: int, batch_size: int, seed: int, data: DataConfig):
    """Source text as packed, masked batches (the trainer's layout and 80/10/10 masking, seeded per
    sequence): lines joined by sep, cut into cls + (seq_len - 2) tokens + sep, the last one padded."""
    lines = [ln.strip() for ln in text.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not lines:
        raise ConfigError(f"--source-text {text} has no text")
    ids = []
    for enc in tokenizer(lines, add_special_tokens=False)["input_ids"]:
        ids += enc + [tokenizer.sep_token_id]
    body = seq_len - 2
    vocab = SimpleNamespace(special_ids=sorted(set(tokenizer.all_special_ids)), vocab_size=len(tokenizer),
                            mask_id=tokenizer.mask_token_id)
    starts = None
    if data.masking != "token":  # whole words / spans of the source vocabulary's words
        starts = piece_word_starts(build_hf_tokenizer(tokenizer.name_or_path, "--source"), split_punctuation=True)
    masker = MLMMasker(data, vocab, starts)
    rows = []
    for start in range(0, len(ids), body):
        chunk = ids[start:start + body]
        rows.append([tokenizer.cls_token_id, *chunk, tokenizer.sep_token_id]
                    + [tokenizer.pad_token_id] * (body - len(chunk)))
    for b in range(0, len(rows), batch_size):
        batch = torch.tensor(rows[b:b + batch_size])
        out = masker(batch, [sequence_seed(seed, 2, i) for i in range(b, b + len(batch))])
        out["attention_mask"] = (batch != tokenizer.pad_token_id).long()
        yield out


@torch.no_grad()
def score(model: nn.Module, batches) -> dict:
    objective = MaskedLMObjective(model).eval()
    stats = MLMStats()
    for batch in batches:
        objective(**batch, score=stats.update)  # as intrinsic.evaluate scores
    return stats.result()


def probe(run: Path, source_text: Path, tag: str | None = None, source_id: str | None = None,
          target_shards: list[str] = (), seq_len: int | None = None, batch_size: int = 16,
          allow_pickle: bool = False) -> dict:
    """The probe's JSON: masked-token scores on ``source_text`` for the source model and the post-trained one
    with the source vocabulary swapped back in (with and without ITLs), and on ``target_shards`` if given."""
    import dataclasses

    from transformers import AutoTokenizer

    from xpt_ds.export.hf import checkpoint_config, load_model
    from xpt_ds.checkpoint.store import read_config
    from xpt_ds.data.tokenizer import saved_tokenizer
    from xpt_ds.evaluation.intrinsic import evaluate
    if not source_text.is_file():
        raise ConfigError(f"--source-text {source_text} not found")
    expand_shards(list(target_shards))  # a missing shard or split: before the models load and score the text
    tag_dir, hf_config = checkpoint_config(run, tag)
    if is_decoder(hf_config):  # next-piece bits per byte instead of masked-token scores
        from xpt_ds.evaluation.decoder_probe import probe_decoder_run
        return probe_decoder_run(run, tag_dir, hf_config, source_text, source_id, list(target_shards), seq_len,
                                 batch_size, allow_pickle)
    post, tag_dir = load_model(run, tag_dir.name, allow_pickle)
    seq_len = seq_len or 128
    run_cfg = read_config(tag_dir.parent, tag_dir.name, allow_pickle)
    data = run_cfg.data
    source_id = source_id or run_cfg.model.source
    # The source as the run built it: the same seed draws the same weights a head-less checkpoint lacks.
    source = load_source_model(dataclasses.replace(run_cfg.model, source=source_id))[0]
    tokenizer = AutoTokenizer.from_pretrained(source_id, trust_remote_code=False)  # never runs --source's code
    try:
        check_vocabulary(tokenizer, source_id)
    except ValueError as e:
        raise ConfigError(f"--source: {e}; give --source the source model's own directory or hub id") from None
    seq_len = min(seq_len, post.config.xpt_max_length)
    batches = lambda: source_batches(source_text, tokenizer, seq_len, batch_size, data.seed, data)  # noqa: E731
    method = method_of(post.config)
    keeps_vocab = method is not None and method.vocab == "source"  # keep_vocab: its rows are the source's, trained
    swapped = ("post-trained, the source's untrained rows swapped back in" if keeps_vocab else
               "post-trained, source vocabulary" + (", with ITLs" if has_itl(post.config) else ""))
    rows = {"source model, source vocabulary": score(source, batches()),
            swapped: score(swap_in_source_vocabulary(post, source), batches())}
    if has_itl(post.config):
        rows["post-trained, source vocabulary, without ITLs"] = score(
            swap_in_source_vocabulary(post, source, keep_itl=False), batches())
    if keeps_vocab:
        rows["post-trained, its own vocabulary (the source's, trained)"] = score(post, batches())
    if target_shards:
        data.seq_len = min(data.seq_len, post.config.xpt_max_length)
        rows[f"post-trained, {'its own' if keeps_vocab else 'target'} vocabulary (target text)"] = evaluate(
            post, saved_tokenizer(tag_dir, run_cfg.model.mask_token), data, list(target_shards), batch_size)
    return {"run": str(run), "tag": tag_dir.name, "source": source_id, "source_text": str(source_text),
            "seq_len": seq_len, **({"target_seq_len": data.seq_len} if target_shards else {}), "rows": rows}
