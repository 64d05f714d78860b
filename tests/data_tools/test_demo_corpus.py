"""The Korean demo corpus (DEMO_CORPUS=ko: konlpy's legal text), prepared exactly as launch/demo.sh does."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from conftest import REPO
from xpt_ds.data.shards import DocReader, scan_shard

SPLITS = ("train", "valid", "test")


@pytest.fixture(scope="module")
def demo_corpus(tmp_path_factory) -> Path:
    corpus = Path(importlib.util.find_spec("konlpy").submodule_search_locations[0]) / "data" / "corpus"
    out = tmp_path_factory.mktemp("demo") / "ko"
    files = sorted(corpus.glob("kolaw/*.txt")) + sorted(corpus.glob("kobill/*.txt"))
    cmd = [sys.executable, "-m", "data_tools.cli.prepare", "--input", *map(str, files), "--out", str(out),
           "--vocab-size", "2000", "--valid", "0.2", "--test", "0.1", "--doc-boundary", "file", "--family", "bert"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def _docs(out: Path, split: str) -> list[list[str]]:
    return [json.loads(line) for line in (out / f"sentences/{split}.jsonl").read_text(encoding="utf-8").splitlines()]


def test_manifest_matches_a_recount(demo_corpus):
    manifest = json.loads((demo_corpus / "manifest.json").read_text())
    sp = spm.SentencePieceProcessor(model_file=str(demo_corpus / "spm.model"))
    assert manifest["vocab_size"] == sp.get_piece_size() == 2000
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.piece_to_id("[MASK]")) == (0, 1, 2, 3, 4)
    for split in SPLITS:
        entry, docs = manifest["splits"][split], _docs(demo_corpus, split)
        indexes = [scan_shard(str(demo_corpus / s)) for s in entry["shards"]]
        reader = DocReader(indexes)
        stored = [reader.read(s, d) for s, ix in enumerate(indexes) for d in range(len(ix.lengths))]
        reader.close()
        assert entry["documents"] == len(stored) == len(docs) > 0
        assert entry["sentences"] == sum(map(len, docs))
        assert entry["tokens"] == sum(map(len, stored))
        for got, doc in zip(stored, docs):
            assert np.array_equal(got, [t for s in sp.encode(doc) for t in s])


def test_no_sentence_in_two_splits(demo_corpus):
    sentences = {split: {s for doc in _docs(demo_corpus, split) for s in doc} for split in SPLITS}
    for a, b in (("train", "valid"), ("train", "test"), ("valid", "test")):
        assert not sentences[a] & sentences[b], (a, b)
    assert sum(map(len, sentences.values())) > 1000
