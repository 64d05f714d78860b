"""The clean stage's dedupe (data_tools.pipeline.clean.seen): a Python set's answers, in batch order (repeats inside
a batch too), through the arrays' merges and the bitmap's growth, also for digests that share their first 8 bytes;
16 bytes a digest in the arrays and 1-4 in the bitmap; and a corpus cleaned through the arrays, interrupted and
resumed on 2 workers, byte for byte the one a plain set of the digests gives; each corpus line is json.dumps's."""
from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from data_tools.pipeline.clean import resume as clean_resume, seen
from data_tools.pipeline.clean.stage import clean
from data_tools.pipeline.options import PrepareOptions
from data_tools.pipeline.clean.seen import SeenSentences
from test_prepare_resume import _corpus, _corpus_bytes, _Interrupt, _split


def _digest(i: int) -> bytes:
    """Distinct for distinct ``i``; every fifth shares its first 8 bytes with the other fifths."""
    d = hashlib.blake2b(str(i).encode(), digest_size=16).digest()
    return b"\7" * 8 + d[8:] if i % 5 == 0 else d


class _SetOfDigests:
    """The reference: a Python set, one digest at a time."""

    def __init__(self):
        self.held: set[bytes] = set()

    def first_seen(self, batch: bytes) -> np.ndarray:
        answers = []
        for i in range(0, len(batch), 16):
            answers.append(batch[i:i + 16] not in self.held)
            self.held.add(batch[i:i + 16])
        return np.array(answers, dtype=bool)


@pytest.mark.parametrize("largest", [3, 12, 200])
def test_first_seen_answers_as_a_set_does(monkeypatch, largest):
    monkeypatch.setattr(seen, "MARK_BITS", 4)  # a bitmap small enough to grow several times here
    monkeypatch.setattr(seen, "SLICE", 7)  # the merges and the marking go through a run in several slices
    rng, s, ref, sizes = random.Random(largest), SeenSentences(), _SetOfDigests(), set()
    for _ in range(600):
        batch = b"".join(_digest(rng.randint(0, 3000)) for _ in range(rng.randint(0, largest)))
        answers = s.first_seen(batch)
        assert answers.dtype == bool and answers.tolist() == ref.first_seen(batch).tolist()
        assert len(s) == len(ref.held)
        sizes.add(s.marks.k)
        assert all(2 * len(newer) < len(older) for (older, _), (newer, _) in zip(s.runs, s.runs[1:]))
    assert len(s.runs) >= 2 and len(sizes) >= 4, (len(s.runs), sizes)  # merged and grown, not one array
    for first, last in s.runs:
        assert (first[1:] >= first[:-1]).all()
    held = [f.to_bytes(8, "big") + l.to_bytes(8, "big") for first, last in s.runs
            for f, l in zip(first.tolist(), last.tolist())]
    assert len(held) == len(set(held)) and set(held) == ref.held
    with pytest.raises(ValueError, match="a batch of digests is 17 bytes, not a multiple of 16"):
        s.first_seen(b"\0" * 17)


def test_the_arrays_hold_16_bytes_a_digest_and_the_bitmap_1_to_4(monkeypatch):
    monkeypatch.setattr(seen, "MARK_BITS", 4)
    s = SeenSentences()
    for start in range(0, 100_000, 5000):
        assert s.first_seen(seen.digests(str(i) for i in range(start, start + 5000))).all()
    held = sum(len(first) for first, _ in s.runs)
    assert held == len(s) == 100_000 and len(s.runs) <= 5
    assert sum(part.nbytes for run in s.runs for part in run) == 16 * held
    assert 8 * held <= 8 * s.marks.bits.nbytes < 32 * held


def test_a_corpus_cleaned_through_the_arrays_and_resumed_is_the_sets(tmp_path, monkeypatch, capsys):
    """The test corpus repeats one sentence in four, across files too. With a 16-bit bitmap nearly every lookup
    searches the arrays, and an interrupted run's resume rebuilds them."""
    files = _corpus(tmp_path / "in")
    with monkeypatch.context() as m:
        m.setattr(clean_resume, "SeenSentences", _SetOfDigests)
        by_set = clean(files, tmp_path / "set", PrepareOptions(splitter=_split), workers=1)
    monkeypatch.setattr(seen, "MARK_BITS", 4)
    monkeypatch.setattr(clean_resume, "CHECKPOINT_BYTES", 1 << 40)  # only the interrupt writes a record
    monkeypatch.setattr(clean_resume, "REBUILD_LINES", 7)  # the resume rebuilds in batches and a remainder
    out = tmp_path / "arrays"
    with pytest.raises(KeyboardInterrupt):
        clean(files, out, PrepareOptions(splitter=_Interrupt(600)), workers=1)
    by_arrays = clean(files, out, PrepareOptions(splitter=_split), workers=2)
    assert "resuming an interrupted run from its last checkpoint: 256 documents" in capsys.readouterr().err
    assert by_set["duplicates"] > 100
    assert {k: by_arrays[k] for k in ("documents", "sentences", "duplicates")} == \
        {k: by_set[k] for k in ("documents", "sentences", "duplicates")}
    assert _corpus_bytes(out) == _corpus_bytes(tmp_path / "set")


def test_a_corpus_line_is_what_json_dumps_writes(tmp_path):
    """The workers encode each sentence and the main process joins the kept ones: each line of corpus.jsonl is
    ``json.dumps(sentences, ensure_ascii=False)``, quotes, backslashes and characters beyond the BMP included, also
    where a duplicate was dropped from the middle of a document."""
    import json
    text = ('Він сказав "так". Шлях C:\\temp\\x є. Нота 𝄞 звучить. Тег </script> тут. Він сказав "так". Кінець.\n\n'
            'Шлях C:\\temp\\x є. Другий документ тут.\n')
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    stats = clean([tmp_path / "in.txt"], tmp_path / "out", PrepareOptions(splitter=_split), workers=2)
    lines = (tmp_path / "out" / "sentences" / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    docs = [json.loads(line) for line in lines]
    assert stats["duplicates"] == 2 and docs[0][0] == 'Він сказав "так"' and "Нота 𝄞 звучить" in docs[0]
    assert lines == [json.dumps(doc, ensure_ascii=False) + "\n" for doc in docs]
