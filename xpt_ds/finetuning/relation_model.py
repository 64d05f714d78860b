"""The relation classifier: any Hugging Face encoder (``AutoModel``) with the typed entity markers added to its
vocabulary, and a head over the hidden states of the subject and object start markers (KLUE's baseline; Baldini
Soares et al. 2019's "entity start" variant, their best), or, for a decoder, of the end markers: a start marker's
state there has not seen its entity (``xpt_ds.finetuning.relation.encode_relations``).

Saved as a directory that stock ``transformers`` reads: the encoder (``save_pretrained``, marker rows included),
the tokenizer with the markers, plus ``relation_head.safetensors`` and ``relation.json`` (labels, markers), which
``load_relation_model`` puts back together.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from xpt_ds.io.file_modes import as_umask

HEAD_FILE, META_FILE = "relation_head.safetensors", "relation.json"


@dataclass
class RelationOutput:
    """What the fine-tuning loop reads of a model's output (as of a transformers ``SequenceClassifierOutput``)."""
    loss: torch.Tensor | None
    logits: torch.Tensor  # [B, labels]


class RelationHead(nn.Module):
    """[h_subj; h_obj] (2H) -> dropout -> dense H -> tanh -> dropout -> labels, the shape of RoBERTa's
    classification head with the two marker states in place of <s>."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(2 * hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, num_labels)

    def forward(self, pair: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(pair)))))


class RelationClassifier(nn.Module):
    def __init__(self, encoder: nn.Module, num_labels: int, dropout: float):
        super().__init__()
        self.encoder = encoder
        self.head = RelationHead(encoder.config.hidden_size, num_labels, dropout)

    def forward(self, input_ids, attention_mask, subject_pos, object_pos, token_type_ids=None, labels=None):
        kw = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state  # [B, T, H]
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        pair = torch.cat([hidden[rows, subject_pos], hidden[rows, object_pos]], dim=-1)  # [B, 2H]
        logits = self.head(pair)
        loss = nn.functional.cross_entropy(logits.float(), labels) if labels is not None else None
        return RelationOutput(loss, logits)


def add_marker_tokens(tokenizer, markers: list[str]) -> dict[str, list[int]]:
    """Add ``markers`` to ``tokenizer`` as special tokens (never split, never lowercased); returns, per marker,
    the ids of the pieces its text was cut into before (``<subj:PER>`` -> ``<``, ``subj``, ``:``, ``PER``,
    ``>`` with an English vocabulary), <unk> and special tokens left out: what ``init_marker_rows`` averages."""
    pieces = {}
    skip = {tokenizer.unk_token_id, *tokenizer.all_special_ids}
    for m in markers:
        pieces[m] = [i for i in tokenizer(m, add_special_tokens=False)["input_ids"] if i not in skip]
    tokenizer.add_tokens(markers, special_tokens=True)
    return pieces


@torch.no_grad()
def init_marker_rows(encoder: nn.Module, tokenizer, pieces: dict[str, list[int]]) -> None:
    """Give every marker a word-embedding row: the mean of the rows of its pieces (``add_marker_tokens``), or
    the mean of all rows where every piece was <unk> (a target vocabulary without Latin letters)."""
    ids = tokenizer.convert_tokens_to_ids(list(pieces))
    emb = encoder.get_input_embeddings()
    old_rows = emb.weight.shape[0]
    # An export's matrix may have more rows than its tokenizer has ids; ids past the tokenizer then land on
    # those unused rows, and the matrix grows only if the new ids pass its end.
    if max(ids) >= old_rows:
        encoder.resize_token_embeddings(max(ids) + 1, mean_resizing=False)
    weight = encoder.get_input_embeddings().weight
    mean_all = weight[:old_rows].float().mean(0)
    for i, src in zip(ids, pieces.values()):
        src = [p for p in src if p < old_rows]
        weight[i] = (weight[src].float().mean(0) if src else mean_all).to(weight.dtype)


def save_relation_model(model: RelationClassifier, tokenizer, labels: list[str], markers: list[str], out: Path,
                        no_relation: str, causal: bool = False) -> None:
    from safetensors.torch import save_file
    out.mkdir(parents=True, exist_ok=True)
    model.encoder.config.id2label = dict(enumerate(labels))
    model.encoder.config.label2id = {n: i for i, n in enumerate(labels)}
    model.encoder.save_pretrained(out)
    tokenizer.save_pretrained(str(out))
    save_file({k: v.detach().cpu().contiguous() for k, v in model.head.state_dict().items()}, str(out / HEAD_FILE))
    as_umask(out)  # safetensors writes 0600 files: the group could not read the model
    meta = {"labels": labels, "markers": markers, "no_relation": no_relation,
            "classify_from": f"concatenated hidden states of the subject and object {'end' if causal else 'start'} "
                             "markers",
            "dropout": model.head.dropout.p}
    (out / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def load_relation_model(path: str | Path, trust_remote_code: bool = False) -> tuple[RelationClassifier, dict]:
    """A directory ``save_relation_model`` wrote -> (the classifier, relation.json); the tokenizer loads with
    ``AutoTokenizer.from_pretrained(path)``. The encoder's code (an adapters or TreLM export's) runs under
    ``xpt_ds.io.trust``'s rules: xpt-ds's own export code, or any with ``trust_remote_code``."""
    from safetensors.torch import load_file
    from transformers import AutoModel

    from xpt_ds.io.trust import reading_weights, remote_code_consent
    path = Path(path)
    meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    remote = remote_code_consent(str(path), trust_remote_code)
    with reading_weights(str(path)):
        encoder = AutoModel.from_pretrained(path, trust_remote_code=remote)
    model = RelationClassifier(encoder, len(meta["labels"]), meta["dropout"])
    model.head.load_state_dict(load_file(str(path / HEAD_FILE)))
    return model.eval(), meta
