"""002 Table 2's intrinsic metrics (PPL, Hits@1/3/5/10, MRR, MR) on the masked tokens of held-out shards, as
JSON. Masks are seeded per sequence (``data.seed``), so every model evaluated on the same shards with the
same tokenizer, sequence length and seed is scored on the same tokens. With ``--run`` the data settings come
from the run's config; the numbers then match the run's own periodic validation on its validation shards,
which uses the same code (``MLMStats`` over the objective's logits: ``MaskedLMObjective``, or for trelm
``TreLMObjective``'s MLM path through the TRILayer).

Which figure compares what: loss, PPL, Hits@k, MRR and MR are per piece and compare only models with the same
vocabulary (the same tokenizer made the shards). ``bits_per_char`` (the masked pieces' NLL in bits over the
``chars`` characters of their surface text; ``mlm_metrics.piece_chars``) compares models across vocabularies,
e.g. a new SentencePiece vocabulary against the source's kept one (003), each on shards of the same text.
``bits_per_word`` (004 §3) does the same per word: the same NLL in bits over ``words``, the masked pieces that
begin a word (``mlm_metrics.bits_per_word`` says why that estimates bits per word of the text).

``--unigram TRAIN_SPEC`` scores the unigram predictor instead of the model, on the same masked tokens: every
masked position gets each piece's add-one-smoothed frequency in the training shards (the run's or export's
tokenizer made both). A model whose figures equal the unigram predictor's has learned no context yet.

A decoder (GPT-2, Llama families) is scored on next-token prediction instead, every piece of the shards once
(``xpt_ds.data.causal``: position restarts, no attention across documents, each document's end predicted as
sep): loss and PPL per piece, ``bits_per_char`` and ``bits_per_byte`` (NLL in bits over the UTF-8 bytes of the
predicted pieces' text, ``mlm_metrics.piece_bytes``), which compare across vocabularies and with other models.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from xpt_ds.config import MASKING_KEYS, ConfigError, DataConfig, from_dict
from xpt_ds.config.methods import method_of
from xpt_ds.data.causal import NextTokenTargets
from xpt_ds.data.manifest import expand_shards, manifest_counts
from xpt_ds.data.mlm import MLMBatchStream, MLMMasker, build_stream
from xpt_ds.data.tokenizer import TargetTokenizer, saved_tokenizer
from xpt_ds.embedding_init.context import count_pieces
from xpt_ds.io.trust import read_config_dict, reading_weights, remote_code_consent
from xpt_ds.metrics.mlm import MLMStats, piece_byte_lengths, piece_char_lengths, piece_word_starts
from xpt_ds.model.decoder import is_decoder
from xpt_ds.model.forward.objective import build_objective


def load_export(model_dir: Path, trust_remote_code: bool = False):
    """(an ``xpt_ds.cli.export`` directory's model, its tokenizer: spm.model, or the source's HF tokenizer of a
    model whose method keeps the source vocabulary). Code the directory ships runs only if it is this xpt-ds's
    own export code or ``trust_remote_code`` (``xpt_ds.io.trust.remote_code_consent``)."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM
    if not model_dir.is_dir():  # else transformers reads the path as a hub id and says so
        raise FileNotFoundError(f"--model {model_dir}: no such directory (an xpt_ds.cli.export output)")
    check_not_a_run(model_dir)
    config = read_config_dict(str(model_dir))
    if not isinstance(config.get("model_type"), str):  # was transformers' ValueError, a traceback
        raise ConfigError(f"--model {model_dir}: its config.json has no model_type, so no transformers class "
                          "reads it (an xpt_ds.cli.export output names one)")
    method = method_of(config)
    if not (model_dir / "spm.model").is_file() and not (method is not None and method.vocab in ("source", "extend")):
        raise FileNotFoundError(f"--model {model_dir} has no spm.model (the SentencePiece model that made the "
                                "shards); xpt_ds.cli.export writes one")
    trusted = remote_code_consent(str(model_dir), trust_remote_code)
    auto = AutoModelForCausalLM if is_decoder(config) else AutoModelForMaskedLM
    with reading_weights(f"--model {model_dir}"):  # float32 also for an export written in bfloat16 (--dtype)
        model = auto.from_pretrained(model_dir, trust_remote_code=trusted, dtype=torch.float32)
    return model, saved_tokenizer(model_dir)


def check_not_a_run(model_dir: Path) -> None:
    """A training run directory, or one of its checkpoints, where an export was expected: name the flags that
    evaluate it (transformers would only say that config.json is missing)."""
    if (model_dir / "config.json").is_file():
        return
    if (model_dir / "checkpoints").is_dir() or (model_dir / "status.json").is_file():
        raise ConfigError(f"--model {model_dir} is a training run directory, not an export: use --run {model_dir}")
    if (model_dir / "COMPLETE").is_file() and model_dir.parent.name == "checkpoints":
        raise ConfigError(f"--model {model_dir} is a checkpoint, not an export: use --run "
                          f"{model_dir.parent.parent} --tag {model_dir.name}")


def export_data_config(config, model_dir: Path) -> DataConfig:
    """The masking and packing of the run an export came from (config.json's ``xpt_data``, written by
    ``xpt_ds.cli.export``), checked like a config section; an export without it (written before 2026-11-27, or not by
    xpt_ds): the defaults at sequence 512, capped by the model's positions."""
    saved = getattr(config, "xpt_data", None)
    if saved is None:
        return DataConfig(seq_len=min(512, getattr(config, "xpt_max_length", 512)))
    if not isinstance(saved, dict) or set(saved) - set(MASKING_KEYS):
        raise ConfigError(f"--model {model_dir}: config.json's xpt_data must be a mapping of {', '.join(MASKING_KEYS)}"
                          f", got {saved!r}")
    return from_dict(DataConfig, saved, f"{model_dir / 'config.json'}: xpt_data.")


class UnigramPredictor(torch.nn.Module):
    """The context-free baseline: the same scores at every masked (or, ``causal``, every predicted) position,
    log((count + 1) / total) of each piece in the training shards. Pad, cls, sep and mask are never targets and
    score -inf; unk keeps its count. ``causal``: sep is a target (a document's end), counted once per document
    as the stream has it."""

    def __init__(self, counts: torch.Tensor, tok: TargetTokenizer, causal: bool = False,
                 skipped: list[str] | None = None):
        super().__init__()
        log_p = torch.log(counts.double() + 1)
        never = [i for i in tok.special_ids if i != tok.unk_id and not (causal and i == tok.sep_id)]
        log_p[never] = -math.inf
        self.register_buffer("log_p", (log_p - torch.logsumexp(log_p, 0)).float())
        self.skipped = list(skipped or [])  # training shards left out as corrupt (on_corrupt='skip')

    @classmethod
    def from_shards(cls, shards: list[str], tok: TargetTokenizer, on_corrupt: str = "fail",
                    causal: bool = False) -> "UnigramPredictor":
        counts, documents, skipped = count_pieces(shards, tok, on_corrupt)
        counts = torch.from_numpy(counts)
        if causal:  # documents end with sep in the stream, not in the shards
            counts[tok.sep_id] += documents
        return cls(counts, tok, causal, skipped)

    @classmethod
    def uniform(cls, tok: TargetTokenizer, causal: bool = False) -> "UnigramPredictor":
        """The uniform guess: every piece that can be a target (not pad, cls, sep or mask) equally likely."""
        return cls(torch.zeros(tok.vocab_size), tok, causal)

    def forward(self, input_ids: torch.Tensor, mlm_positions: torch.Tensor, mlm_targets: torch.Tensor,
                attention_mask: torch.Tensor | None = None, return_logits: bool = True,
                position_ids: torch.Tensor | None = None, score=None) -> torch.Tensor:
        """The objectives' interface: log p of every id at each scored position, or (``score``) 0 once
        ``score(log_p, targets)`` has them."""
        logits = self.log_p.expand(len(mlm_positions), -1)
        if score is None:
            return logits
        score(logits, mlm_targets)
        return logits.new_zeros(())


@torch.no_grad()
def evaluate(model, tok: TargetTokenizer, data: DataConfig, shards: list[str], batch_size: int = 16,
             max_batches: int = 0, device: str = "cpu", causal: bool | None = None) -> dict:
    """One pass over ``shards`` (every token once); the metrics and the number of masked (``causal``: predicted)
    tokens scored. ``model`` is a *ForMaskedLM, a *ForCausalLM or a ``UnigramPredictor`` (pass ``causal``)."""
    if causal is None:
        causal = is_decoder(model.config)
    masker = NextTokenTargets(tok) if causal else MLMMasker(data, tok)
    inner = build_stream(expand_shards(shards, tok), data, tok, 0, manifest_counts(shards))
    stream = MLMBatchStream(inner, masker, batch_size, rank=0, world=1, num_workers=0, single_pass=True)
    # trelm: through the TRILayer
    objective = (model if isinstance(model, UnigramPredictor) else build_objective(model)).to(device).eval()
    stats = MLMStats(device, piece_char_lengths(tok), piece_word_starts(tok), piece_byte_lengths(tok))
    for i, batch in enumerate(stream):
        if max_batches and i >= max_batches:
            break
        batch = {k: v.to(device) for k, v in batch.items() if k != "seq_ids"}
        objective(**batch, score=stats.update)  # a decoder's in parts (xpt_ds.model.forward.causal_lm)
    skipped = list(inner.skipped)  # data.on_corrupt_shard: skip; the scores are of the other shards only
    return {**stats.result(), **({"skipped_shards": skipped} if skipped else {})}


def emit_json(result: dict, out: Path | None) -> None:
    """Print ``result`` as JSON on stdout (the samples' text as itself; escaped where the terminal's encoding
    cannot show it), and also write it to ``out`` (UTF-8) when given."""
    text = json.dumps(result, indent=2, ensure_ascii=False)
    try:
        print(text)
    except UnicodeEncodeError:
        print(json.dumps(result, indent=2))
    if out:
        out.write_text(text + "\n", encoding="utf-8")
