"""The clean stage's dedupe set (data_tools.pipeline.clean.seen): a Python set's answers, in batch order, through its
spills into sorted arrays, their merges and the bitmap's growth, also for digests that share their first 8 bytes;
16 bytes a digest in the arrays and 1-4 in the bitmap; and a corpus cleaned through the arrays, interrupted and
resumed, byte for byte the one the set alone gives."""
from __future__ import annotations

import hashlib
import random

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


@pytest.mark.parametrize("recent", [1, 3, 64])
def test_first_seen_answers_as_a_set_does(monkeypatch, recent):
    monkeypatch.setattr(seen, "MARK_BITS", 4)  # a bitmap small enough to grow several times here
    rng, s, ref, sizes = random.Random(recent), SeenSentences(recent), set(), set()
    for _ in range(600):
        batch = [_digest(rng.randint(0, 3000)) for _ in range(rng.randint(0, 12))]
        expected = []
        for d in batch:
            expected.append(d not in ref)
            ref.add(d)
        assert s.first_seen(batch) == expected
        assert len(s) == len(ref)
        sizes.add(s.marks.k)
    assert len(s.runs) >= 2 and len(sizes) >= 4, (len(s.runs), sizes)  # merged and grown, not one array
    for first, last in s.runs:
        assert (first[1:] >= first[:-1]).all()
    held = {f.to_bytes(8, "big") + l.to_bytes(8, "big") for first, last in s.runs
            for f, l in zip(first.tolist(), last.tolist())}
    assert held | s.recent == ref and not held & s.recent


def test_the_arrays_hold_16_bytes_a_digest_and_the_bitmap_1_to_4(monkeypatch):
    monkeypatch.setattr(seen, "MARK_BITS", 4)
    s = SeenSentences(recent=1000)
    for start in range(0, 100_000, 5000):
        assert all(s.first_seen([hashlib.blake2b(str(i).encode(), digest_size=16).digest()
                                 for i in range(start, start + 5000)]))
    held = sum(len(first) for first, _ in s.runs)
    assert held + len(s.recent) == 100_000 and len(s.recent) < 1000 + 5000
    assert sum(part.nbytes for run in s.runs for part in run) == 16 * held
    assert 8 * held <= 8 * s.marks.bits.nbytes < 32 * held


def test_a_corpus_cleaned_through_the_arrays_and_resumed_is_the_sets(tmp_path, monkeypatch, capsys):
    """The test corpus repeats one sentence in four, across files too. With a set of 8 digests and a 16-bit
    bitmap, nearly every lookup goes through the arrays, and an interrupted run's resume rebuilds them."""
    files = _corpus(tmp_path / "in")
    by_set = clean(files, tmp_path / "set", PrepareOptions(splitter=_split), workers=1)  # < RECENT: the set alone
    monkeypatch.setattr(seen, "RECENT", 8)
    monkeypatch.setattr(seen, "MARK_BITS", 4)
    monkeypatch.setattr(clean_resume, "CHECKPOINT_BYTES", 1 << 40)  # only the interrupt writes a record
    out = tmp_path / "arrays"
    with pytest.raises(KeyboardInterrupt):
        clean(files, out, PrepareOptions(splitter=_Interrupt(600)), workers=1)
    by_arrays = clean(files, out, PrepareOptions(splitter=_split), workers=2)
    assert "resuming an interrupted run from its last checkpoint: 256 documents" in capsys.readouterr().err
    assert by_set["duplicates"] > 100
    assert {k: by_arrays[k] for k in ("documents", "sentences", "duplicates")} == \
        {k: by_set[k] for k in ("documents", "sentences", "duplicates")}
    assert _corpus_bytes(out) == _corpus_bytes(tmp_path / "set")
