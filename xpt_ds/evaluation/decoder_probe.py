"""000's source-language probe for a decoder source: how much English do the post-trained layers still hold?

A post-trained decoder with a new vocabulary reads English only through that vocabulary, so its English bits per
byte (``xpt-ds evaluate --text``) mix what the layers lost with how badly the target tokenizer cuts English. The
probe takes the vocabulary out of the question: the post-trained model gets the source's own input embeddings and
head back (``with_source_vocabulary``), keeps every post-trained layer and the final norm (and GPT-2's learned
positions), and is scored on English text in the source's own tokenizer, beside the untouched source on the same
text: once with its ITLs, and once without them, which is the source's own architecture with the post-trained
layers in it. A method that reads the source vocabulary (``keep_vocab``, ``extend``) is also scored as it is,
with its own trained rows and its own tokenizer. Scores are ``xpt_ds.evaluation.text_bpb``'s: next-piece bits
per byte of each line, in float32.

The post-trained model is the checkpoint as its export would be (``xpt_ds.export.hf.Exported``: LoRA
merged, ``extend``'s rows joined). At XPT's phase-1 boundary the reused layers, the final norm and GPT-2's
positions are still the source's, so the model without ITLs is the source, bit for bit
(``tests/evaluation/test_probe_decoder.py``).
"""
from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from xpt_ds.config import ConfigError
from xpt_ds.config.methods import has_itl, method_of
from xpt_ds.model.decoder import DECODER_FAMILIES
from xpt_ds.model.skeleton import assign, skeleton


# The row that says what the post-trained layers kept of English, the first of these a probe has: the reused
# layers alone in the source's architecture (ITL methods), the layers as they are (no ITLs), the layers under the
# source's untrained rows (a method that trains the source's own rows).
SWAPPED, WITHOUT_ITLS = "post-trained, source vocabulary", "post-trained, source vocabulary, without ITLs"
ROWS_SWAPPED = "post-trained, the source's untrained rows swapped back in"
LAYERS_ROWS = (WITHOUT_ITLS, SWAPPED, ROWS_SWAPPED)


def layers_row(rows: dict) -> str:
    return next(name for name in LAYERS_ROWS if name in rows)


def check_same_layers(post: nn.Module, source: nn.Module, name: str) -> None:
    """The source must be the one whose layers the run reused: the same kind, width and depth."""
    p, s = post.config, source.config
    depth = p.num_hidden_layers - (2 if has_itl(post.config) else 0)
    if (p.model_type, p.hidden_size, depth) != (s.model_type, s.hidden_size, s.num_hidden_layers):
        raise ConfigError(f"--source {name}: a {s.model_type} of {s.num_hidden_layers} layers of width "
                          f"{s.hidden_size}, but the run's reused layers are a {p.model_type}'s: {depth} of width "
                          f"{p.hidden_size}; give the run's own source")


@torch.no_grad()
def with_source_vocabulary(post: nn.Module, source: nn.Module, keep_itl: bool = True) -> nn.Module:
    """A model that reads and predicts ``source``'s vocabulary with ``post``'s layers: the source's input
    embeddings and head (and their ids), everything else ``post``'s. ``keep_itl`` False (a model with ITLs):
    the source's architecture, ITL_in and ITL_out left out and the reused layers renumbered. Its float32 values
    are those of ``post`` and ``source`` themselves, not copies (it is only read, under no_grad: a copy would
    hold a third model in memory, 4.6 GB more at the 1B shape)."""
    family = DECODER_FAMILIES[post.config.model_type]
    drop = has_itl(post.config) and not keep_itl
    cfg = copy.deepcopy(source.config if drop else post.config)
    if not drop:
        cfg.vocab_size = source.config.vocab_size
        for key in ("pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings"):
            setattr(cfg, key, getattr(source.config, key, None))
    ours, theirs = dict(post.named_parameters()), dict(source.named_parameters())
    embed = f"{family.base}.{family.embeddings}.weight"
    layers = f"{family.base}.{family.layers}."

    def value(name: str) -> torch.Tensor:
        if name in (embed, "lm_head.weight"):
            return theirs[name].detach().float()
        if drop and name.startswith(layers):
            index, rest = name[len(layers):].split(".", 1)
            name = f"{layers}{int(index) + 1}.{rest}"  # layer i of the source is layer i + 1 after ITL_in
        return ours[name].detach().float()

    return assign(skeleton(cfg), value).eval()  # a tied head stays tied: assign keeps shared parameters shared


def probe_decoder(post: nn.Module, source: nn.Module, tokenizer, own_tokenizer, source_name: str, text: Path,
                  seq_len: int, batch_size: int, device: str = "cpu") -> dict:
    """The probe's rows on ``text``: the source, the post-trained layers with the source vocabulary (with and
    without ITLs), and a method that reads the source vocabulary with its own rows (``own_tokenizer``, else
    None). Each model is scored on ``device`` (CUDA where evaluate --text would use it), one at a time."""
    from xpt_ds.evaluation.text_bpb import score_file
    check_same_layers(post, source, source_name)

    def score(model: nn.Module, tok=tokenizer) -> dict:
        try:
            return score_file(model.eval().to(device), tok, text, seq_len, batch_size, device)
        finally:
            if model is source or model is post:  # read again later; a swapped model is dropped where it is
                model.to("cpu")
    rows = {"source model, source vocabulary": score(source)}
    if own_tokenizer is not None:
        rows[ROWS_SWAPPED] = score(with_source_vocabulary(post, source))
        rows["post-trained, its own vocabulary and tokenizer"] = score(post, own_tokenizer)
        return rows
    rows[SWAPPED + (", with ITLs" if has_itl(post.config) else "")] = score(with_source_vocabulary(post, source))
    if has_itl(post.config):
        rows[WITHOUT_ITLS] = score(with_source_vocabulary(post, source, keep_itl=False))
    return rows


def probe_decoder_run(run: Path, tag_dir: Path, hf_config, source_text: Path, source_id: str | None,
                      target_shards: list[str], seq_len: int | None, batch_size: int, allow_pickle: bool) -> dict:
    """``xpt-ds probe`` of a run whose source is a decoder: the JSON ``xpt_ds.evaluation.probe.probe`` writes, with
    ``text_bpb``'s figures in its rows."""
    from transformers import AutoTokenizer

    from xpt_ds.export.hf import Exported, checkpoint_values
    from xpt_ds.checkpoint.store import read_config
    from xpt_ds.data.tokenizer import saved_tokenizer
    from xpt_ds.evaluation.intrinsic import evaluate
    from xpt_ds.evaluation.text_bpb import load_decoder, max_positions
    exported = Exported(hf_config, None)
    exported.values = checkpoint_values(tag_dir, exported.trained, allow_pickle)  # another model's config: one line
    post = assign(exported.model, exported.value)
    run_cfg = read_config(tag_dir.parent, tag_dir.name, allow_pickle)
    # the flag, or the run's config key, that named the source: what a line about it names
    what = f"--source {source_id}" if source_id else f"model.source {run_cfg.model.source} (the run's config)"
    source_id = source_id or run_cfg.model.source
    source, tokenizer = load_decoder(Path(source_id), what=what)
    own = None
    method = method_of(hf_config)
    saved = saved_tokenizer(tag_dir)
    if method is not None and method.vocab in ("source", "extend"):  # the checkpoint holds its HF tokenizer
        own = AutoTokenizer.from_pretrained(saved.path, trust_remote_code=False)
    # seq_len None: the models' positions, as evaluate --text reads (a sweep's source row is its source_text.json's)
    limit = min(n for n in (max_positions(post.config), max_positions(source.config), seq_len) if n)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # as evaluate --text scores
    rows = probe_decoder(post, source, tokenizer, own, source_id, source_text, limit, batch_size, device)
    data = run_cfg.data
    if target_shards:
        data.seq_len = min(data.seq_len, post.config.xpt_max_length)
        rows[f"post-trained, {'its own' if own is not None else 'target'} vocabulary (target text)"] = evaluate(
            post, saved, data, list(target_shards), batch_size, device=device)
    return {"run": str(run), "tag": tag_dir.name, "source": source_id, "source_text": str(source_text),
            "seq_len": limit, "scores": "next-piece bits per byte of each line (xpt_ds.evaluation.text_bpb)",
            **({"target_seq_len": data.seq_len} if target_shards else {}), "rows": rows}
