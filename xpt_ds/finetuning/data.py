"""Fine-tuning data: CSV/TSV/JSONL rows -> checked examples -> label ids -> tokenized, padded batches.

Every problem with a file is a ``FinetuneError`` whose one-line message names the file, the line and
the column or value.
"""
from __future__ import annotations

import bisect
import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from xpt_ds.errors import UserError, no_file

if TYPE_CHECKING:
    import torch

TASKS = ("classification", "regression", "token_classification", "relation")  # relation: finetuning.relation
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}


class FinetuneError(UserError, ValueError):
    """A bad fine-tuning input; the message names the culprit and fits on one line."""


@dataclass(frozen=True)
class Columns:
    text: str = "text"
    text_pair: str = ""  # empty: single sentences
    label: str = "label"
    tokens: str = "tokens"
    tags: str = "tags"


@dataclass(frozen=True)
class Example:
    where: str  # "FILE line N", for error messages
    text: str | tuple[str, ...]  # a sentence, or the words of a token-classification example
    text_pair: str | None
    label: str | float | tuple[str, ...]  # class name, score, or one IOB2 tag per word


def _read_rows(path: Path, role: str) -> tuple[list[str] | None, list[tuple[int, dict]]]:
    """(a CSV/TSV file's header, or None for JSON lines; (line number, row) pairs); a CSV/TSV row's number is
    the line where it ends."""
    if not path.is_file():
        raise FinetuneError(no_file(path, f"{role} file"))
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise FinetuneError(f"{role} {path}: unknown format '{path.suffix}' (use {', '.join(FORMATS)})")
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            if fmt == "jsonl":
                rows = []
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise FinetuneError(f"{path} line {n}: not valid JSON ({e.msg})") from None
                    if not isinstance(row, dict):
                        raise FinetuneError(f"{path} line {n}: expected one JSON object per line")
                    rows.append((n, row))
                return None, rows
            # TSV as the GLUE-style releases write it: no quoting, so a '"' inside a sentence is text.
            kw = dict(delimiter="\t", quoting=csv.QUOTE_NONE) if fmt == "tsv" else {}
            reader = csv.reader(f, **kw)
            header = next((fields for fields in reader if fields), None)  # blank lines before it skipped
            rows = []
            for fields in reader:
                if not fields:  # a blank line, as csv.DictReader skips it
                    continue
                if len(fields) != len(header):  # an unquoted comma or tab too many, or a field missing
                    raise FinetuneError(f"{path} line {reader.line_num}: {len(fields)} fields but the header has "
                                        f"{len(header)}")
                rows.append((reader.line_num, dict(zip(header, fields))))
            return header, rows
    except UnicodeDecodeError:
        raise FinetuneError(f"{role} {path} is not UTF-8 text") from None
    except csv.Error as e:
        raise FinetuneError(f"{role} {path}: {e}") from None


def _field(row: dict, column: str, where: str):
    if column not in row:
        raise FinetuneError(f"{where}: no column '{column}' (has: {', '.join(str(k) for k in row)})")
    value = row[column]
    if value is None or (isinstance(value, str) and not value.strip()):
        raise FinetuneError(f"{where}: column '{column}' is empty")
    return value


def _words(value, column: str, where: str) -> tuple[str, ...]:
    """A JSON list, or whitespace-separated words in a string (the natural CSV form)."""
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise FinetuneError(f"{where}: column '{column}' must be a list of strings or a space-separated string")


def _check_tags(tags: tuple[str, ...], where: str) -> None:
    for tag in tags:
        if tag != "O" and not (tag[:2] in ("B-", "I-") and len(tag) > 2):
            raise FinetuneError(f"{where}: tag '{tag}' is not IOB2 (O, B-TYPE or I-TYPE)")


def _text(value, column: str, where: str) -> str:
    """A sentence: a JSON list or object there is no text (it was trained on as its Python spelling)."""
    if isinstance(value, (dict, list)):
        raise FinetuneError(f"{where}: column '{column}' must be a string, got a JSON {type(value).__name__}")
    return str(value)


def _example(row: dict, task: str, cols: Columns, where: str) -> Example:
    if task == "token_classification":
        words = _words(_field(row, cols.tokens, where), cols.tokens, where)
        tags = _words(_field(row, cols.tags, where), cols.tags, where)
        if len(words) != len(tags):
            raise FinetuneError(f"{where}: {len(words)} tokens but {len(tags)} tags")
        _check_tags(tags, where)
        return Example(where, words, None, tags)
    text = _text(_field(row, cols.text, where), cols.text, where)
    pair = _text(_field(row, cols.text_pair, where), cols.text_pair, where) if cols.text_pair else None
    raw = _field(row, cols.label, where)
    if task == "regression":
        try:
            if isinstance(raw, bool):
                raise ValueError
            label = float(raw)
        except (TypeError, ValueError):
            raise FinetuneError(f"{where}: label {raw!r} is not a number") from None
        if not math.isfinite(label):
            raise FinetuneError(f"{where}: label {raw!r} is not finite")
        return Example(where, text, pair, label)
    if isinstance(raw, (dict, list)):
        raise FinetuneError(f"{where}: label {raw!r} must be a string or number")
    return Example(where, text, pair, str(raw).strip())


def read_examples(path: str | Path, role: str, task: str, cols: Columns) -> list[Example]:
    """All examples of one file; ``role`` ("--train", ...) prefixes file-level errors."""
    path = Path(path)
    header, rows = _read_rows(path, role)
    for column in _columns(task, cols) if header else []:  # a column the header lacks is line 1's problem
        if column not in header:
            raise FinetuneError(f"{path} line 1 (the header): no column '{column}' (has: {', '.join(header)})")
        if header.count(column) > 1:  # which one holds the data, the first or the last?
            raise FinetuneError(f"{path} line 1 (the header): column '{column}' occurs {header.count(column)} times")
    if not rows:
        raise FinetuneError(f"{role} {path} has no examples")
    return [_example(row, task, cols, f"{path} line {n}") for n, row in rows]


def _columns(task: str, cols: Columns) -> list[str]:
    """The columns every example of ``task`` reads."""
    if task == "token_classification":
        return [cols.tokens, cols.tags]
    return [cols.text, *([cols.text_pair] if cols.text_pair else []), cols.label]


def build_labels(train: list[Example], task: str, path: str) -> list[str]:
    """Label names from the training file; their order is the model's class ids. Integer-looking names
    sort numerically (0, 1, 2, ..., 10), IOB2 tags put ``O`` first. Regression has none."""
    if task == "regression":
        return []
    if task == "token_classification":
        tags = sorted({t for ex in train for t in ex.label} - {"O"}, key=lambda t: (t[2:], t))
        if not tags:
            raise FinetuneError(f"--train {path}: every tag is O; token_classification needs entities")
        return ["O", *tags]
    names = {ex.label for ex in train}
    if len(names) < 2:
        raise FinetuneError(f"--train {path}: only one label ({', '.join(names)}); classification needs two or more")
    if all(n.lstrip("-").isdigit() for n in names):
        return sorted(names, key=int)
    scores = sorted(n for n in names if _is_number(n))
    if len(scores) == len(names) and any(not float(n).is_integer() for n in scores):  # 0.8, 3.5: regression data
        shown = ", ".join(scores[:3]) + (", ..." if len(scores) > 3 else "")
        raise FinetuneError(f"--train {path}: the labels are numbers, not all whole ({shown}); scores need "
                            f"--task regression (classification would make each of the {len(names)} values a class)")
    return sorted(names)


def _is_number(name: str) -> bool:
    try:
        return math.isfinite(float(name))
    except ValueError:
        return False


def label_ids(examples: list[Example], labels: list[str], task: str) -> list:
    """Per example: a class id, a float score, or a list of tag ids. A label not seen in training is an error."""
    if task == "regression":
        return [ex.label for ex in examples]
    index = {name: i for i, name in enumerate(labels)}
    shown = ", ".join(labels) if len(labels) <= 20 else ", ".join(labels[:20]) + ", ..."
    out = []
    for ex in examples:
        names = ex.label if task == "token_classification" else (ex.label,)
        for name in names:
            if name not in index:
                raise FinetuneError(f"{ex.where}: label '{name}' does not occur in the training file (labels: {shown})")
        ids = [index[n] for n in names]
        out.append(ids if task == "token_classification" else ids[0])
    return out


@dataclass
class Encoded:
    """Model inputs (lists of ids, unpadded) and, for token classification, the piece each word is read at."""
    features: list[dict[str, list]]
    word_pos: list[list[int]]  # per example, per word: the piece it is read at (word_pieces), -1 if truncated away


def running_text(words: tuple[str, ...]) -> tuple[str, list[int]]:
    """The words of a token-classification example joined by single spaces, the text the model saw in pretraining,
    and where each word ends in it. Not the words one at a time (``is_split_into_words``): a byte-level BPE
    tokenizer (GPT-2, RoBERTa, Llama 3, Qwen, SmolLM2) then gives a word after the first the pieces of a text's
    first word, "is" instead of "Ġis", and transformers 5.24 ignores ``add_prefix_space=True`` for a tokenizer loaded
    as ``TokenizersBackend``."""
    ends, at = [], 0
    for word in words:
        at += len(word)
        ends.append(at)
        at += 1
    return " ".join(words), ends


def word_pieces(offsets: list[tuple[int, int]], ends: list[int], last: bool = False,
                cut: bool = False) -> list[int]:
    """The piece each word is trained and scored on, as a position in the row (-1: truncated away), from the
    pieces' character offsets in ``running_text``'s text and its words' ``ends``: the word's first piece, or with
    ``last`` its last one. A decoder reads a word at its last piece: under causal attention the first one has not
    seen the rest of the word (``▁`` alone, or ``Ġm`` of ``Ġm au ve``). A piece belongs to the first word ending
    after the piece starts: a SentencePiece "▁" alone, the space before "sat" in "▁ s at", starts "sat", as
    ``word_ids`` has it for words tokenized one at a time. Special tokens have empty offsets and belong to no word.
    ``cut``: the row was truncated; with ``last``, its last word is then truncated away too if its pieces stop
    short of its end."""
    pos, reach = [-1] * len(ends), [0] * len(ends)
    for i, (start, end) in enumerate(offsets):
        w = bisect.bisect_right(ends, start)
        if end > start and w < len(ends) and (last or pos[w] < 0):
            pos[w], reach[w] = i, end
    seen = [w for w, p in enumerate(pos) if p >= 0]
    if last and cut and seen and reach[seen[-1]] < ends[seen[-1]]:
        pos[seen[-1]] = -1
    return pos


def pair_separator(tokenizer) -> str:
    """What a decoder's second sentence of a pair starts with: the eos token where the tokenizer puts nothing
    between a pair's sentences (GPT-2's, Qwen's and SmolLM2's join "hello world" and "good morning" into hello Ġworld
    good Ġmorning, one run of text), so the second starts as a new document does; empty where the tokenizer's pair
    template already separates them (Llama 3's bos, an XPT export's ``<s> A </s> B``). Put at the start of the
    second sentence, where truncation, which cuts the longer sentence's end, does not reach it."""
    first = tokenizer("a")["input_ids"]
    second = tokenizer("b", add_special_tokens=False)["input_ids"]
    if len(tokenizer("a", "b")["input_ids"]) > len(first) + len(second):
        return ""
    return tokenizer.eos_token or ""


def template_separator(tokenizer, sep: str) -> bool:
    """Make a fast tokenizer put ``sep`` (``pair_separator``'s) between a pair's sentences itself: its own
    post-processor, then a ``TemplateProcessing`` whose pair is ``$A sep $B``. The tokenizer a fine-tuned model is
    saved with (``--save-model``) then gives stock inference the pairs training saw. The ids equal ``sep`` put
    before the second sentence's text, which is what this falls back to, the tokenizer left as it was (False), where
    the template does not give them (a slow tokenizer has no post-processor to extend)."""
    from tokenizers import processors
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    want = tokenizer("a", sep + "b")["input_ids"]
    old = backend.post_processor
    template = processors.TemplateProcessing(single="$A:0", pair=f"$A:0 {sep}:0 $B:1",
                                             special_tokens=[(sep, tokenizer.convert_tokens_to_ids(sep))])
    backend.post_processor = template if old is None else processors.Sequence([old, template])
    if tokenizer("a", "b")["input_ids"] == want and tokenizer("a", sep + "b")["input_ids"] != want:
        return True
    backend.post_processor = old
    return False


def encode(examples: list[Example], targets: list, tokenizer, task: str, max_length: int,
           token_types: bool, causal: bool = False, pair_sep: str = "") -> Encoded:
    """``token_types``: the model has more than one token type. Asked for explicitly, because some tokenizers
    (an ``xpt_ds.cli.export`` one) leave them out by default, and dropped otherwise, because some emit type 1
    for a pair's second sentence even for RoBERTa, which has a single type. ``causal``: a decoder, which reads a
    word at its last piece (``word_pieces``). ``pair_sep``: what a pair's second sentence starts with (a decoder's
    ``pair_separator``)."""
    kw = dict(truncation=True, max_length=max_length, return_token_type_ids=token_types)
    if task == "token_classification":  # the words as running text, each word's pieces found by their offsets
        texts = [running_text(ex.text) for ex in examples]
        enc = tokenizer([text for text, _ in texts], return_offsets_mapping=True, **kw)
    else:
        pairs = [ex.text_pair for ex in examples] if examples[0].text_pair is not None else None
        if pairs is not None and pair_sep:
            pairs = [pair_sep + p for p in pairs]
        enc = tokenizer([ex.text for ex in examples], pairs, **kw)
    keep = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_types else [])
    features, word_pos = [], []
    for i, target in enumerate(targets):
        feat = {k: enc[k][i] for k in keep if k in enc}
        if task == "token_classification":
            at = word_pieces(enc["offset_mapping"][i], texts[i][1], last=causal,
                             cut=len(feat["input_ids"]) >= max_length)
            labels = [-100] * len(feat["input_ids"])  # only the piece a word is read at is trained and scored
            for w, pos in enumerate(at):
                if pos >= 0:
                    labels[pos] = target[w]
            feat["labels"] = labels
            word_pos.append(at)
        else:
            feat["labels"] = target
        features.append(feat)
    return Encoded(features, word_pos)


def collate(features: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest example: ``pad_id`` for ids, 0 for masks/types, -100 for token labels. A
    number per example (a class id, a score, relation's marker positions) becomes one tensor entry."""
    import torch  # here: the CLIs parse their flags (finetuning.config) without importing torch

    width = max(len(f["input_ids"]) for f in features)
    batch = {}
    for key in features[0]:
        if not isinstance(features[0][key], list):
            dtype = torch.float32 if isinstance(features[0][key], float) else torch.long
            batch[key] = torch.tensor([f[key] for f in features], dtype=dtype)
            continue
        fill = {"input_ids": pad_id, "labels": -100}.get(key, 0)
        batch[key] = torch.tensor([f[key] + [fill] * (width - len(f[key])) for f in features], dtype=torch.long)
    return batch
