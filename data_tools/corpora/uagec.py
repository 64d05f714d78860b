"""UA-GEC (Ukrainian grammatical error correction corpus, PyPI ``ua-gec==2.1.3``) -> plain text, its train/test
partition and sentence labels (``export``, for ``xpt-data uagec``).

The package's files are read directly (``ua_gec/data/``; the package is not imported). Every document is
listed in ``data/metadata.csv`` with its partition (train/test) and one or two annotators, and its corrected
text exists once per annotator; one copy is kept (the lowest annotator id), and a document whose corrected
text is identical to an earlier one is dropped too. Written to ``--out``:

* ``text/{train,test}.txt``: corrected text, one paragraph per line, documents separated by a blank line
  (``prepare``'s default ``--doc-boundary blank``). Pretrain on ``text/train.txt`` only when the model will
  be evaluated on UA-GEC's test partition.
* ``partition.json``: the package's train/test partition (document ids in the order written), the
  annotation layer, the annotator kept, the package version and counts.
* ``labels/{train,test}.jsonl``: one line per original (uncorrected) sentence,
  ``{"text": ..., "label": 0|1, "doc_id": ...}`` with label 1 when the kept annotator changed that sentence
  (the package's ``source-sentences`` and ``target-sentences`` files are aligned line by line).
"""
from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import re
from pathlib import Path

from data_tools.errors import PrepareError

LAYERS = ("gec-fluency", "gec-only")
PARTITIONS = ("train", "test")


def find_data_dir() -> Path:
    """``ua_gec/data`` of the installed package (located without importing it)."""
    spec = importlib.util.find_spec("ua_gec")
    if spec is None or not spec.submodule_search_locations:
        raise PrepareError("the ua-gec package is not installed: pip install --no-deps ua-gec==2.1.3")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    if not (data / "metadata.csv").is_file():
        raise PrepareError(f"{data}/metadata.csv not found: is this ua-gec 2.x?")
    return data


def _version(data_dir: Path) -> str | None:
    m = re.search(r"""__version__\s*=\s*["']([^"']+)""", (data_dir.parent / "version.py").read_text()) \
        if (data_dir.parent / "version.py").is_file() else None
    return m.group(1) if m else None


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").rstrip("\n").split("\n")


def export(out: Path, data_dir: Path | None = None, layer: str = "gec-fluency", skip_sensitive: bool = False,
           labels: bool = True) -> dict:
    if layer not in LAYERS:
        raise PrepareError(f"unknown layer '{layer}' (valid: {', '.join(LAYERS)})")
    data_dir = Path(data_dir) if data_dir else find_data_dir()
    out = Path(out)
    (out / "text").mkdir(parents=True, exist_ok=True)
    if labels:
        (out / "labels").mkdir(parents=True, exist_ok=True)
    with open(data_dir / "metadata.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    texts = {p: open(out / "text" / f"{p}.txt.tmp", "w", encoding="utf-8") for p in PARTITIONS}
    label_files = {p: open(out / "labels" / f"{p}.jsonl.tmp", "w", encoding="utf-8") for p in PARTITIONS} \
        if labels else {}
    ids: dict[str, list[str]] = {p: [] for p in PARTITIONS}
    seen: set[bytes] = set()
    stats = {"documents": {p: 0 for p in PARTITIONS}, "annotator_copies_dropped": 0, "identical_texts_dropped": 0,
             "sensitive_dropped": 0, "label_sentences": {p: 0 for p in PARTITIONS},
             "label_corrected": {p: 0 for p in PARTITIONS}, "label_docs_misaligned": 0}
    try:
        for row in rows:
            doc_id, part = row["id"], row["partition"]
            if part not in PARTITIONS:
                raise PrepareError(f"{data_dir}/metadata.csv: document {doc_id} has partition '{part}'")
            annotators = sorted(int(a) for a in row["annotator_id"].split())
            stats["annotator_copies_dropped"] += len(annotators) - 1
            if skip_sensitive and row.get("is_sensitive", "0").strip() == "1":
                stats["sensitive_dropped"] += 1
                continue
            ann = annotators[0]
            base = data_dir / layer / part
            paragraphs = [p.strip() for p in _lines(base / "target" / f"{doc_id}.a{ann}.txt") if p.strip()]
            digest = hashlib.blake2b("\n".join(paragraphs).encode(), digest_size=16).digest()
            if not paragraphs or digest in seen:
                stats["identical_texts_dropped"] += 1
                continue
            seen.add(digest)
            if ids[part]:
                texts[part].write("\n")
            texts[part].write("\n".join(paragraphs) + "\n")
            ids[part].append(doc_id)
            stats["documents"][part] += 1
            if labels:
                src = _lines(base / "source-sentences" / f"{doc_id}.src.txt")
                tgt = _lines(base / "target-sentences" / f"{doc_id}.a{ann}.txt")
                if len(src) != len(tgt):
                    stats["label_docs_misaligned"] += 1
                    continue
                for s, t in zip(src, tgt):
                    if not s.strip():
                        continue
                    label = int(s != t)
                    label_files[part].write(json.dumps({"text": s, "label": label, "doc_id": doc_id},
                                                       ensure_ascii=False) + "\n")
                    stats["label_sentences"][part] += 1
                    stats["label_corrected"][part] += label
    finally:
        for f in [*texts.values(), *label_files.values()]:
            f.close()
    for p in PARTITIONS:
        Path(texts[p].name).replace(out / "text" / f"{p}.txt")
        if labels:
            Path(label_files[p].name).replace(out / "labels" / f"{p}.jsonl")
    partition = {"package": "ua-gec", "version": _version(data_dir), "layer": layer,
                 "annotator": "lowest annotator id of each document", "stats": stats, **ids}
    (out / "partition.json").write_text(json.dumps(partition, indent=1, ensure_ascii=False) + "\n")
    return stats
