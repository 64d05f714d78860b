"""Relation extraction data (KLUE-RE, 001): records -> checked examples -> text with typed entity markers ->
tokenized windows that keep every marker.

A record has ``sentence``, ``subject_entity`` and ``object_entity`` (each ``word``, ``start_idx``, ``end_idx``:
inclusive character offsets into ``sentence``, and ``type``) and a label. Files are KLUE-RE's own layout (a
JSON list of records, ``klue-re-v1.1_train.json``) or JSONL, one record per line. Every problem is a one-line
``FinetuneError`` naming the file, the record (JSON list) or line (JSONL) and the field.

The markers are typed special tokens, ``<subj:PER>`` ... ``</subj:PER>`` and ``<obj:ORG>`` ... ``</obj:ORG>``
(KLUE's baseline marks entities with added special tokens; typing them follows Zhou & Chen 2021; why not their
punctuation markers: docs/evaluation.md). They are inserted into the text without added spaces, so the
characters between them are the sentence's own. A start marker goes before the whitespace ahead of its entity
(``중기의<obj:POH> 무신``), so that the entity's first word keeps the pieces it has in running text: after a special
token, neither a SentencePiece tokenizer (``▁무신``) nor a byte-level BPE one (``Ġsat``) would give it its space.

An encoder's classifier reads the start markers (KLUE's baseline); a decoder's reads the end markers, the first
positions whose causal attention has seen the whole entity (``subject_pos``/``object_pos``).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from xpt_ds.errors import no_file
from xpt_ds.finetuning.data import FinetuneError

log = logging.getLogger("xpt_ds.cli.finetune")

ENTITY_FIELDS = ("subject_entity", "object_entity")
ROLES = {"subject_entity": "subj", "object_entity": "obj"}


@dataclass(frozen=True)
class Entity:
    word: str
    start: int  # first character, as KLUE's start_idx
    end: int  # last character, inclusive, as KLUE's end_idx
    type: str


@dataclass(frozen=True)
class RelationExample:
    where: str  # "FILE record N" or "FILE line N", for error messages
    sentence: str
    subject: Entity
    object: Entity
    label: str


def markers(entity_type: str) -> tuple[str, str, str, str]:
    """(subject start, subject end, object start, object end) markers of one entity type."""
    return (f"<subj:{entity_type}>", f"</subj:{entity_type}>", f"<obj:{entity_type}>", f"</obj:{entity_type}>")


def marker_tokens(examples: list[RelationExample]) -> list[str]:
    """Every marker the examples need, in a fixed order (types sorted): the tokens added to the tokenizer.
    Entity types are inputs, not labels, so test-only types get markers too (untrained rows, but not <unk>)."""
    types = sorted({t for ex in examples for t in (ex.subject.type, ex.object.type)})
    return [m for t in types for m in markers(t)]


def _records(path: Path, role: str) -> list[tuple[str, object]]:
    """(where, record) pairs of a JSON list (KLUE-RE's files) or of JSONL."""
    if not path.is_file():
        raise FinetuneError(no_file(path, f"{role} file"))
    if path.suffix.lower() not in (".json", ".jsonl"):
        raise FinetuneError(f"{role} {path}: unknown format '{path.suffix}' (relation reads .json or .jsonl)")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise FinetuneError(f"{role} {path} is not UTF-8 text") from None
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            raise FinetuneError(f"{path} line {e.lineno}: not valid JSON ({e.msg})") from None
        return [(f"{path} record {i}", r) for i, r in enumerate(records, 1)]
    out = []
    for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028, U+0085 ... are text in a line
        if not line.strip():
            continue
        try:
            out.append((f"{path} line {n}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise FinetuneError(f"{path} line {n}: not valid JSON ({e.msg})") from None
    return out


def _entity(record: dict, field: str, sentence: str, where: str) -> Entity:
    if field not in record:
        raise FinetuneError(f"{where}: no field '{field}' (has: {', '.join(str(k) for k in record)})")
    value = record[field]
    if not isinstance(value, dict):
        raise FinetuneError(f"{where}: field '{field}' must be an object with word, start_idx, end_idx, type")
    for key in ("word", "start_idx", "end_idx", "type"):
        if key not in value:
            raise FinetuneError(f"{where}: field '{field}' has no '{key}'")
    word, start, end, typ = value["word"], value["start_idx"], value["end_idx"], value["type"]
    if not isinstance(word, str) or not word:
        raise FinetuneError(f"{where}: {field}.word must be a non-empty string")
    if not isinstance(typ, str) or not typ.strip() or any(c in typ for c in "<>/ \t\n"):
        raise FinetuneError(f"{where}: {field}.type {typ!r} must be a non-empty name without spaces, '<', '>', '/'")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
        raise FinetuneError(f"{where}: {field}.start_idx/end_idx must be integers, got {start!r}, {end!r}")
    if not 0 <= start <= end < len(sentence):
        raise FinetuneError(f"{where}: {field} offsets {start}..{end} lie outside the sentence "
                            f"({len(sentence)} characters)")
    if sentence[start:end + 1] != word:
        raise FinetuneError(f"{where}: {field}.word {word!r} does not match sentence[{start}:{end}+1] = "
                            f"{sentence[start:end + 1]!r} (start_idx/end_idx are inclusive character offsets)")
    return Entity(word, start, end, typ)


def _example(record, label_field: str, where: str) -> RelationExample:
    if not isinstance(record, dict):
        raise FinetuneError(f"{where}: expected a JSON object (a KLUE-RE record)")
    sentence = record.get("sentence")
    if not isinstance(sentence, str) or not sentence.strip():
        raise FinetuneError(f"{where}: field 'sentence' is missing or empty")
    subject, obj = (_entity(record, field, sentence, where) for field in ENTITY_FIELDS)
    if label_field not in record:
        raise FinetuneError(f"{where}: no field '{label_field}' (has: {', '.join(str(k) for k in record)})")
    label = record[label_field]
    if isinstance(label, (dict, list, bool)) or label is None or not str(label).strip():
        raise FinetuneError(f"{where}: field '{label_field}' {label!r} must be a relation name")
    return RelationExample(where, sentence, subject, obj, str(label).strip())


def read_relation_examples(path: str | Path, role: str, label_field: str = "label") -> list[RelationExample]:
    """All records of one file, checked; ``role`` ("--train", ...) prefixes file-level errors."""
    path = Path(path)
    records = _records(path, role)
    if not records:
        raise FinetuneError(f"{role} {path} has no examples")
    return [_example(r, label_field, where) for where, r in records]


def relation_labels(train: list[RelationExample], no_relation: str, path: str) -> list[str]:
    """Label names, ``no_relation`` first (as KLUE numbers it: id 0), the rest sorted; ids follow this order."""
    names = {ex.label for ex in train}
    if len(names) < 2:
        raise FinetuneError(f"--train {path}: only one label ({', '.join(names)}); relation needs two or more")
    return ([no_relation] if no_relation in names else []) + sorted(names - {no_relation})


def _before_space(sentence: str, start: int, other: Entity) -> int:
    """Where an entity starting at ``start`` gets its start marker: before the whitespace ahead of it, but not
    before the start of an other entity that opened earlier, nor past its end marker. Two entities starting
    together move together."""
    floor = max([other.start] * (other.start < start) + [other.end + 1] * (other.end + 1 <= start), default=0)
    at = start
    while at > floor and sentence[at - 1].isspace():
        at -= 1
    return at


def mark(ex: RelationExample) -> str:
    """The sentence with the typed markers around both entities. Nested, identical or crossing spans stay
    well formed as far as they can: at one position end markers come before start markers; of two starts
    the longer span opens first, of two ends the one that opened later closes first; ties: subject outside."""
    s_start, s_end, o_start, o_end = markers(ex.subject.type)[:2] + markers(ex.object.type)[2:]
    events = []  # (position, 0 end / 1 start, order among equals, text)
    pair = ((ex.subject, s_start, s_end, ex.object), (ex.object, o_start, o_end, ex.subject))
    for rank, (ent, start_m, end_m, other) in enumerate(pair):
        events.append((_before_space(ex.sentence, ent.start, other), 1, (-ent.end, rank), start_m))
        events.append((ent.end + 1, 0, (-ent.start, -rank), end_m))
    events.sort(key=lambda e: e[:3])
    out, at = [], 0
    for pos, _, _, text in events:
        out += [ex.sentence[at:pos], text]
        at = pos
    out.append(ex.sentence[at:])
    return "".join(out)


@dataclass
class RelationEncoded:
    features: list[dict]  # input_ids, attention_mask[, token_type_ids], subject_pos, object_pos, labels
    kept: list[int]  # index into the examples of each feature
    dropped: int  # examples whose markers do not fit in max_length together


def _specials(tokenizer) -> tuple[list[int], list[int]]:
    """The ids a tokenizer puts before and after one sentence ([CLS] / [SEP], <s> / </s>), from its own output:
    the sentence's pieces are the same with and without them."""
    probe = "a"
    full = tokenizer(probe)["input_ids"]
    bare = tokenizer(probe, add_special_tokens=False)["input_ids"]
    for k in range(len(full) - len(bare) + 1):
        if full[k:k + len(bare)] == bare:
            return full[:k], full[k + len(bare):]
    raise FinetuneError(f"tokenizer {type(tokenizer).__name__}: cannot tell its special tokens around a sentence")


def _window(n: int, first: int, last: int, budget: int) -> tuple[int, int] | None:
    """[a, b) of at most ``budget`` of ``n`` pieces containing pieces first..last, centred on them; None if
    they do not fit."""
    if last - first + 1 > budget:
        return None
    if n <= budget:
        return 0, n
    a = max(0, min(first - (budget - (last - first + 1)) // 2, n - budget))
    return a, a + budget


def encode_relations(examples: list[RelationExample], targets: list[int], tokenizer, max_length: int,
                     token_types: bool, role: str, causal: bool = False) -> RelationEncoded:
    """Marked sentences -> ids. A sentence longer than ``max_length`` is cut to a window around its four
    markers; an example whose markers are farther apart than that is dropped, counted and logged, never cut
    through a marker. ``subject_pos``/``object_pos`` index where the classifier reads: the start markers, or a
    decoder's (``causal``) end markers."""
    before, after = _specials(tokenizer)
    budget = max_length - len(before) - len(after)
    enc = tokenizer([mark(ex) for ex in examples], add_special_tokens=False)["input_ids"]
    features, kept, dropped = [], [], 0
    for i, (ex, ids, target) in enumerate(zip(examples, enc, targets)):
        want = tokenizer.convert_tokens_to_ids(list(markers(ex.subject.type)[:2] + markers(ex.object.type)[2:]))
        found = [ids.index(m) if m in ids else -1 for m in want]
        if min(found) < 0:
            raise FinetuneError(f"{ex.where}: the tokenizer split an entity marker; were the markers added?")
        window = _window(len(ids), min(found), max(found), budget)
        if window is None:
            dropped += 1
            continue
        a, b = window
        ids = before + ids[a:b] + after
        feat = {"input_ids": ids, "attention_mask": [1] * len(ids)}
        if token_types:
            feat["token_type_ids"] = [0] * len(ids)
        read = (1, 3) if causal else (0, 2)
        feat.update(subject_pos=len(before) + found[read[0]] - a, object_pos=len(before) + found[read[1]] - a,
                    labels=target)
        features.append(feat)
        kept.append(i)
    if dropped:
        log.warning("%s: %d of %d examples dropped: their entity markers lie more than max_length %d pieces "
                    "apart", role, dropped, len(examples), max_length)
    if not features:
        raise FinetuneError(f"{role}: every example was dropped (entity markers farther apart than "
                            f"--max-length {max_length} pieces)")
    return RelationEncoded(features, kept, dropped)
