"""data_tools, the writer side of docs/shard_format.md: input formats, cleaning, splitting, SentencePiece,
parallel/resumable sharding and the manifest, checked against the reader (``xpt_ds.data.shards``)."""
from __future__ import annotations

import bz2
import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from conftest import REPO, write_synthetic_corpus
from data_tools.errors import PrepareError
from data_tools.pipeline.clean import clean
from data_tools.pipeline.options import DEFAULTS
from data_tools.pipeline.readers import detect_format, read_documents
from data_tools.pipeline.shards import id_dtype, write_shard
from data_tools.pipeline.split import split
from data_tools.pipeline.state import SPLITS
from data_tools.pipeline.text import clean_text, split_sentences
from data_tools.prepare import run_pipeline
from xpt_ds.data.shards import DocReader, scan_shard

DOCS = [["대한민국은 동아시아에 있는 나라이다. 수도는 서울이다.", "인구는 약 5천만 명이다."],
        ["서울은 대한민국의 수도이다."],
        ["부산은 항구 도시이다.", "해운대가 유명하다!"]]
TITLES = ["대한민국", "서울", "부산"]


def cli(*args, module="data_tools.prepare", env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def _text(docs) -> str:
    return "\n\n".join("\n".join(d) for d in docs) + "\n"


def _wikiextractor(docs) -> str:
    return "".join(f'<doc id="{i}" url="https://ko.wikipedia.org/wiki?curid={i}" title="{t}">\n{t}\n\n' +
                   "\n".join(d) + "\n</doc>\n" for i, (t, d) in enumerate(zip(TITLES, docs)))


def _jsonl(docs) -> str:
    return "".join(json.dumps({"id": str(i), "url": "u", "title": t, "text": "\n".join(d)}, ensure_ascii=False)
                   + "\n" for i, (t, d) in enumerate(zip(TITLES, docs)))


def _write(path: Path, text: str, compress: str | None) -> Path:
    data = text.encode()
    if compress == "gz":
        data = gzip.compress(data, mtime=0)
    elif compress == "bz2":
        data = bz2.compress(data)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("compress,suffix", [(None, ""), ("gz", ".gz"), ("gz", ""), ("bz2", ".bz2")])
@pytest.mark.parametrize("fmt", ["text", "wikiextractor", "jsonl"])
def test_each_input_format_is_detected_and_read(tmp_path, fmt, compress, suffix):
    """Plain text, WikiExtractor (<doc> blocks, title line dropped) and its --json mode; compressed files are
    recognised from their magic bytes, with or without a .gz suffix."""
    make = {"text": _text, "wikiextractor": _wikiextractor, "jsonl": _jsonl}[fmt]
    path = _write(tmp_path / f"wiki_00{suffix}", make(DOCS), compress)
    assert detect_format(path) == fmt
    assert list(read_documents(path)) == DOCS
    assert list(read_documents(path, fmt=fmt)) == DOCS


def test_text_doc_boundary_file_and_format_override(tmp_path):
    files = [_write(tmp_path / f"d{i}.txt", "\n\n".join(d) + "\n", None) for i, d in enumerate(DOCS)]
    assert [doc for f in files for doc in read_documents(f, doc_boundary="file")] == DOCS
    assert len([doc for f in files for doc in read_documents(f, doc_boundary="blank")]) > len(DOCS)
    wiki = _write(tmp_path / "wiki", _wikiextractor(DOCS), None)
    as_text = list(read_documents(wiki, fmt="text"))  # --format text keeps the markup lines as text
    assert as_text[0][0].startswith("<doc id=")
    with pytest.raises(PrepareError, match="outside a <doc> block"):
        list(read_documents(_write(tmp_path / "plain", _text(DOCS), None), fmt="wikiextractor"))
    with pytest.raises(PrepareError, match=r"plain:1: invalid JSON"):
        list(read_documents(tmp_path / "plain", fmt="jsonl"))


@pytest.mark.parametrize("compress", [None, "gz"])
def test_invalid_utf8_names_file_and_line(tmp_path, compress):
    raw = "첫 문장이다.\n둘째 문장이다.\n".encode() + b"bad \xff\xfe byte\n" + "넷째.\n".encode()
    path = tmp_path / ("bad.txt.gz" if compress else "bad.txt")
    path.write_bytes(gzip.compress(raw) if compress else raw)
    proc = cli("--input", path, "--out", tmp_path / "out", "--vocab-size", 50, "--workers", 1)
    assert_one_line_error(proc, f"{path}:3: invalid UTF-8")


@pytest.mark.parametrize("text,want", [
    ("대한민국은 민주공화국이다. 주권은 국민에게 있다.", ["대한민국은 민주공화국이다.", "주권은 국민에게 있다."]),
    ("원주율은 3.14이다. 다음 문장이다.", ["원주율은 3.14이다.", "다음 문장이다."]),
    ("그는 말했다.그리고 떠났다.", ["그는 말했다.", "그리고 떠났다."]),
    ("정말요? 네! 알겠습니다… 그럼 안녕.", ["정말요?", "네!", "알겠습니다…", "그럼 안녕."]),
    ("“좋다.” 그가 말했다.", ["“좋다.”", "그가 말했다."]),
    ("발의연월일 : 2010. 11. 12. 제안이유", ["발의연월일 : 2010. 11. 12.", "제안이유"]),
    ("1. 서론 부분이다. 2. 본론", ["1. 서론 부분이다.", "2. 본론"]),
    ("가. 목적은 이것이다. 나. 범위", ["가. 목적은 이것이다.", "나. 범위"]),
    ("하지 마. 그럼 가.", ["하지 마.", "그럼 가."]),
    ("今日は晴れ。明日は雨。", ["今日は晴れ。", "明日は雨。"]),
    ("Dr. Kim met J. R. Smith in the U.S. It rained.", ["Dr. Kim met J. R. Smith in the U.S.", "It rained."]),
    ("Він живе у м. Київ на вул. Хрещатик. Потім поїхав.", ["Він живе у м. Київ на вул. Хрещатик.", "Потім поїхав."]),
    ("We use e.g. this, etc. and more. Fine.", ["We use e.g. this, etc. and more.", "Fine."]),
    ("  1. Вступ. Далі.", ["1. Вступ.", "Далі."]),  # a list label after leading spaces
    ("Mr. " * 3000 + "Smith left. Then", ["Mr. " * 3000 + "Smith left.", "Then"]),  # one long run of kept cuts
])
def test_default_splitter(text, want):
    assert split_sentences(text) == want


def test_normalisation_and_whitespace():
    assert clean_text("정말요？\u3000네！\t\ufeff좋아\u200b요") == "정말요? 네! 좋아요"
    assert clean_text("ﾊﾝｶｸ ①", "NFKC") == "ハンカク 1"
    assert clean_text("ﾊﾝｶｸ", "NFC") == "ﾊﾝｶｸ"
    assert clean_text("e\u0301", "NFC") == "\u00e9" and clean_text("e\u0301", "none") == "e\u0301"


def _corpus_docs(out: Path) -> list[list[str]]:
    return [json.loads(line) for line in (out / "sentences/corpus.jsonl").read_text().splitlines()]


def test_pluggable_splitter(tmp_path, monkeypatch):
    (tmp_path / "my_splitter.py").write_text("def by_comma(text):\n    return text.split(',')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    src = _write(tmp_path / "in.txt", "하나요, 둘이다. 셋이요, 넷이요\n", None)
    clean([src], tmp_path / "a", DEFAULTS.replace(splitter="my_splitter:by_comma"))
    assert _corpus_docs(tmp_path / "a") == [["하나요", "둘이다. 셋이요", "넷이요"]]
    clean([src], tmp_path / "b", DEFAULTS.replace(splitter="none"))
    assert _corpus_docs(tmp_path / "b") == [["하나요, 둘이다. 셋이요, 넷이요"]]
    clean([src], tmp_path / "c", DEFAULTS.replace(splitter="my_splitter:by_comma"), workers=2)  # in workers too
    assert _corpus_docs(tmp_path / "c") == [["하나요", "둘이다. 셋이요", "넷이요"]]
    with pytest.raises(PrepareError, match="cannot import"):
        clean([src], tmp_path / "d", DEFAULTS.replace(splitter="no_such_module:f"))
    (tmp_path / "bad_splitter.py").write_text("def split(text):\n    raise ValueError('no rule for ' + text[:3])\n")
    for workers in (1, 2):  # raised in this process, and in a worker process
        assert_one_line_error(cli("clean", "--input", src, "--out", tmp_path / f"e{workers}", "--workers", workers,
                                  "--splitter", "bad_splitter:split", env={"PYTHONPATH": str(tmp_path)}),
                              "sentence splitter bad_splitter:split raised ValueError: no rule for 하나요",
                              "on the paragraph '하나요, 둘이다.")


def test_dedupe_and_length_filters(tmp_path):
    src = _write(tmp_path / "in.txt", "\n".join([
        "첫 문서의 첫 문장이다. 반복되는 문장이다. 가", "", "반복되는 문장이다. 둘째 문서다.", "",
        "반복되는 문장이다.", "", "x" * 50 + ". 짧지 않은 문장이다."]) + "\n", None)
    stats = clean([src], tmp_path / "out", DEFAULTS.replace(min_chars=2, max_chars=40))
    assert _corpus_docs(tmp_path / "out") == [["첫 문서의 첫 문장이다.", "반복되는 문장이다."], ["둘째 문서다."],
                                              ["짧지 않은 문장이다."]]
    assert (stats["duplicates"], stats["too_short"], stats["too_long"], stats["empty_documents"]) == (2, 1, 1, 1)
    stats = clean([src], tmp_path / "keep", DEFAULTS.replace(min_chars=0, max_chars=0, dedupe=False))
    assert stats["duplicates"] == 0 and stats["sentences"] == 8


def test_split_is_deterministic_by_document(tmp_path):
    src = write_synthetic_corpus(tmp_path / "c.txt", docs=60)
    clean([src], tmp_path / "out")
    corpus = _corpus_docs(tmp_path / "out")

    def run(valid, test, seed):
        split(tmp_path / "out", DEFAULTS.replace(valid=valid, test=test, seed=seed))
        return {s: (tmp_path / f"out/sentences/{s}.jsonl").read_text() for s in SPLITS}

    a, b = run(0.1, 5, 1), run(0.1, 5, 1)
    assert a == b
    docs = {s: [json.loads(line) for line in a[s].splitlines()] for s in SPLITS}
    assert [len(docs[s]) for s in SPLITS] == [49, 6, 5]  # --valid 0.1 of 60 documents, --test 5
    assert sorted(map(json.dumps, sum(docs.values(), []))) == sorted(map(json.dumps, corpus))  # a partition
    sents = {s: {x for d in docs[s] for x in d} for s in SPLITS}
    assert not sents["train"] & sents["valid"] and not sents["train"] & sents["test"] and \
        not sents["valid"] & sents["test"]
    assert run(0.1, 5, 2) != a
    with pytest.raises(PrepareError, match="too few documents: 60 documents cannot give 30 valid"):
        split(tmp_path / "out", DEFAULTS.replace(valid=30, test=30, seed=0))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    return write_synthetic_corpus(d / "corpus.txt", docs=80, seed=3)


def _run(src, out, workers=1, **kw):
    kw = {"vocab_size": 300, "valid": 0.1, "test": 0.1, "shard_docs": 7, "workers": workers, **kw}
    return run_pipeline([src], out, **kw)


def test_manifest_matches_the_reader_and_a_retokenization(tmp_path, synthetic):
    stats = _run(synthetic, tmp_path / "out", spm_input_sentences=200)
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format_version"] == 1 and manifest["tokenizer"] == "spm.model"
    assert stats["spm"]["sampled_sentences"] == 200
    sp = spm.SentencePieceProcessor(model_file=str(out / manifest["tokenizer"]))
    assert manifest["vocab_size"] == sp.get_piece_size() == 300
    keys = set()
    for split_name in SPLITS:
        entry = manifest["splits"][split_name]
        docs = [json.loads(line) for line in (out / f"sentences/{split_name}.jsonl").read_text().splitlines()]
        assert entry["documents"] == len(docs) > 0
        assert entry["sentences"] == sum(map(len, docs))
        want = [np.array([t for ids in sp.encode(d) for t in ids]) for d in docs]
        assert entry["tokens"] == sum(map(len, want))
        indexes = [scan_shard(str(out / name)) for name in entry["shards"]]
        assert [len(ix.lengths) for ix in indexes[:-1]] == [7] * (len(indexes) - 1)  # --shard-docs 7
        assert all(ix.dtype == np.uint16 for ix in indexes)
        assert sum(len(ix.lengths) for ix in indexes) == entry["documents"]
        assert sum(ix.tokens for ix in indexes) == entry["tokens"]
        reader = DocReader(indexes)
        got = [reader.read(s, d) for s, ix in enumerate(indexes) for d in range(len(ix.lengths))]
        reader.close()
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
        for name in entry["shards"]:
            with tarfile.open(out / name) as tar:
                keys |= {m.name for m in tar}
    assert len(keys) == sum(manifest["splits"][s]["documents"] for s in SPLITS)
    assert all(k.count(".") == 2 and k.endswith(".ids.npy") for k in keys)  # "{key}.ids.npy", keys without dots


def test_manifest_is_accepted_by_the_trainer_loader(tmp_path, synthetic):
    from xpt_ds.data.mlm import expand_shards
    from xpt_ds.data.tokenizer import build_tokenizer
    out = tmp_path / "out"
    _run(synthetic, out, family="bert")
    tok = build_tokenizer(str(out / "spm.model"))
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    shards = expand_shards([f"{out}/manifest.json:train"], tok)
    assert len(shards) == len(json.loads((out / "manifest.json").read_text())["splits"]["train"]["shards"])


def _tree(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def test_one_and_two_workers_write_identical_shards(tmp_path, synthetic):
    _run(synthetic, tmp_path / "w1", workers=1, shard_docs=None, shard_tokens=400)
    _run(synthetic, tmp_path / "w2", workers=2, shard_docs=None, shard_tokens=400)
    one, two = _tree(tmp_path / "w1"), _tree(tmp_path / "w2")
    assert one == two  # shards, manifest, spm.model: byte-identical (and in a different directory)
    assert sum(name.startswith("train-") for name in one) >= 4
    lengths = [scan_shard(str(tmp_path / "w1" / n)).tokens for n in sorted(one) if n.startswith("train-")]
    assert max(lengths[:-1]) < 1000 and min(lengths[:-1]) >= 300  # about --shard-tokens 400, whole documents


def test_rerun_skips_complete_shards_and_redoes_interrupted_ones(tmp_path, synthetic):
    out = tmp_path / "out"
    _run(synthetic, out)
    manifest = json.loads((out / "manifest.json").read_text())
    shards = [out / n for s in SPLITS for n in manifest["splits"][s]["shards"]]
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in shards}
    # A killed run: one shard never renamed (only its temp file, half written), one renamed but its completion
    # never recorded, one half-written over an old complete shard of the same name.
    lost, unrecorded, truncated = shards[0], shards[1], shards[2]
    lost.with_name(lost.name + ".tmp4242").write_bytes(lost.read_bytes()[:700])
    lost.unlink()
    (out / ".prepare/shards" / f"{unrecorded.name}.json").unlink()
    truncated.write_bytes(truncated.read_bytes()[:1024])
    (out / "manifest.json").unlink()
    proc = cli("--input", synthetic, "--out", out, "--vocab-size", 300, "--valid", 0.1, "--test", 0.1,
               "--shard-docs", 7, "--workers", 2)
    assert proc.returncode == 0, proc.stderr
    assert "clean: up to date" in proc.stderr and "spm: up to date" in proc.stderr
    assert f"{len(shards) - 3} of {len(shards)} shards already complete, skipped" in proc.stderr
    assert "writing 3 shard(s)" in proc.stderr
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in shards}
    for p in shards:
        assert after[p.name][1] == before[p.name][1]  # same bytes either way
        assert (after[p.name][0] == before[p.name][0]) == (p not in (lost, unrecorded, truncated))
    assert not list(out.glob("*.tmp*"))
    assert json.loads((out / "manifest.json").read_text()) == manifest
    proc = cli("tokenize", "--out", out, "--shard-docs", 7)  # the tokenize stage alone: nothing left to do
    assert proc.returncode == 0 and f"{len(shards)} of {len(shards)} shards already complete" in proc.stderr
    assert {p.name: p.stat().st_mtime_ns for p in shards} == {k: v[0] for k, v in after.items()}


def test_a_tokenize_stopped_while_removing_an_old_plans_shards_leaves_no_manifest(tmp_path, synthetic):
    """A new shard plan (--shard-docs 14 after 7) removes the old plan's extra shards. A run that stops part way
    through (here: the last of them is a directory, which cannot be unlinked, standing in for a kill at that
    point) must not leave the old manifest.json naming shards already gone; the rerun then writes a manifest
    that matches the directory."""
    out = tmp_path / "out"
    _run(synthetic, out)
    old = json.loads((out / "manifest.json").read_text())["splits"]["train"]["shards"]
    (out / "train-000099.tar").mkdir()
    proc = cli("tokenize", "--out", out, "--shard-docs", 14)
    assert_one_line_error(proc, "train-000099.tar")
    assert not (out / old[-1]).exists()  # one of the old plan's shards was removed before the stop
    assert not (out / "manifest.json").exists()
    (out / "train-000099.tar").rmdir()
    assert cli("tokenize", "--out", out, "--shard-docs", 14).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["splits"]["train"]["shards"]) < len(old)
    assert all((out / n).is_file() for s in SPLITS for n in manifest["splits"][s]["shards"])


def test_stage_subcommands_match_the_single_command(tmp_path, synthetic):
    for args in (["clean", "--input", synthetic, "--workers", 2], ["split", "--valid", 0.1, "--test", 0.1],
                 ["spm", "--vocab-size", 300, "--model-type", "bpe"], ["tokenize", "--shard-docs", 7, "--workers", 1]):
        proc = cli(*args, "--out", tmp_path / "staged")
        assert proc.returncode == 0, proc.stderr
    _run(synthetic, tmp_path / "single", model_type="bpe")
    assert _tree(tmp_path / "staged") == _tree(tmp_path / "single")
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "staged/spm.model"))
    assert sp.piece_to_id("<mask>") == 4 and sp.pad_id() == 1


def test_uint32_ids_when_the_vocabulary_exceeds_65536(tmp_path):
    assert id_dtype(65536) == np.uint16 and id_dtype(65537) == np.uint32
    docs = [[[70_000, 1], [65_536]], [[5]], [[100_000, 2, 3]]]
    stats = write_shard(tmp_path / "train-000000.tar", "train", 0, docs, vocab_size=100_001)
    assert stats == {"documents": 3, "sentences": 4, "tokens": 7}
    index = scan_shard(str(tmp_path / "train-000000.tar"))
    assert index.dtype == np.uint32 and index.lengths.tolist() == [3, 1, 3]
    reader = DocReader([index])
    assert [reader.read(0, d).tolist() for d in range(3)] == [[70_000, 1, 65_536], [5], [100_000, 2, 3]]
    reader.close()
    write_shard(tmp_path / "small.tar", "train", 0, [[[65_535, 0]]], vocab_size=65_536)
    assert scan_shard(str(tmp_path / "small.tar")).dtype == np.uint16


def test_one_line_errors(tmp_path, synthetic):
    out = tmp_path / "out"
    assert_one_line_error(cli("--input", tmp_path / "missing.txt", "--out", out), "input not found", "missing.txt")
    (tmp_path / "empty.txt").write_text("\n\n  \n")
    assert_one_line_error(cli("--input", tmp_path / "empty.txt", "--out", out), "empty input")
    few = _write(tmp_path / "few.txt", _text(DOCS), None)
    assert_one_line_error(cli("--input", few, "--out", out, "--valid", 1, "--test", 2),
                          "too few documents: 3 documents cannot give 1 valid + 2 test")
    line = assert_one_line_error(cli("--input", synthetic, "--out", out, "--vocab-size", 20000, "--workers", 1),
                                 "--vocab-size 20000", "maximum of")
    maximum = int(line.split("maximum of ")[1].split()[0])
    assert 300 < maximum < 20000
    proc = cli("spm", "--out", out, "--vocab-size", maximum)  # the reported maximum does work
    assert proc.returncode == 0, proc.stderr


def test_a_second_run_on_the_same_directory_is_refused(tmp_path, synthetic):
    import fcntl
    (tmp_path / "out/.prepare").mkdir(parents=True)
    with open(tmp_path / "out/.prepare/lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert_one_line_error(cli("--input", synthetic, "--out", tmp_path / "out"), "another data_tools.prepare")


def _fake_uagec(root: Path) -> Path:
    """The layout of ua-gec 2.1.3's ua_gec/data (gec-fluency layer only)."""
    data = root / "ua_gec" / "data"
    rows = [("0000", "1 2", "train", ["Перше речення.", "Друге речення."], ["Перше речення.", "Друге речення!"]),
            ("0001", "1", "test", ["Тестовий текст."], ["Тестовий текст."]),
            ("0002", "2 1", "train", ["Ще один документ."], ["Ще одинн документ."])]
    (data).mkdir(parents=True)
    (root / "ua_gec" / "version.py").write_text('__version__ = "2.1.3"\n')
    lines = ["id,author_id,is_native,region,gender,occupation,submission_type,source_language,annotator_id,"
             "partition,is_sensitive"]
    for doc_id, anns, part, target, source in rows:
        lines.append(f"{doc_id},a,1,r,g,o,t,,{anns},{part},0")
        base = data / "gec-fluency" / part
        for sub in ("target", "target-sentences", "source-sentences"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        (base / "source-sentences" / f"{doc_id}.src.txt").write_text("\n".join(source) + "\n")
        for a in anns.split():
            text = target if a == "1" else [s.replace(".", " (a2).") for s in target]
            (base / "target" / f"{doc_id}.a{a}.txt").write_text(" ".join(text) + "\n\n")
            (base / "target-sentences" / f"{doc_id}.a{a}.txt").write_text("\n".join(text) + "\n")
    (data / "metadata.csv").write_text("\n".join(lines) + "\n")
    return data


def test_uagec_export(tmp_path):
    data = _fake_uagec(tmp_path / "pkg")
    proc = cli("--out", tmp_path / "out", "--data-dir", data, module="data_tools.uagec")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    # one copy per document (annotator 1), documents separated by a blank line
    assert (out / "text/train.txt").read_text() == "Перше речення. Друге речення.\n\nЩе один документ.\n"
    assert (out / "text/test.txt").read_text() == "Тестовий текст.\n"
    part = json.loads((out / "partition.json").read_text())
    assert (part["train"], part["test"], part["version"]) == (["0000", "0002"], ["0001"], "2.1.3")
    labels = [json.loads(x) for x in (out / "labels/train.jsonl").read_text().splitlines()]
    assert [(x["text"], x["label"]) for x in labels] == [("Перше речення.", 0), ("Друге речення!", 1),
                                                         ("Ще одинн документ.", 1)]
    assert [json.loads(x)["label"] for x in (out / "labels/test.jsonl").read_text().splitlines()] == [0]
    assert list(read_documents(out / "text/train.txt")) == [["Перше речення. Друге речення."], ["Ще один документ."]]


def test_uagec_package(tmp_path):
    """The real UA-GEC package, which launch/install.sh installs."""
    import importlib.util
    assert importlib.util.find_spec("ua_gec") is not None, "ua-gec not installed: run bash launch/install.sh"
    from data_tools.corpora.uagec import export
    stats = export(tmp_path / "out")
    part = json.loads((tmp_path / "out/partition.json").read_text())
    assert len(part["train"]) == len(set(part["train"])) == stats["documents"]["train"] > 1000
    assert not set(part["train"]) & set(part["test"])
    assert stats["annotator_copies_dropped"] > 0 and stats["label_docs_misaligned"] == 0
    assert 0 < stats["label_corrected"]["train"] < stats["label_sentences"]["train"]


def test_token_estimate_reads_a_document_longer_than_its_sample(tmp_path, monkeypatch, corpus_bert):
    """A split whose first document (one JSON line) is longer than the sample, e.g. a whole book as one
    document: the sample is completed to the end of that line instead of parsing half a line."""
    from data_tools.pipeline import shards
    sp = spm.SentencePieceProcessor(model_file=str(corpus_bert / "spm.model"))
    first, second = json.dumps(["ein satz hier und noch mehr"] * 40), json.dumps(["kurz"])
    path = tmp_path / "train.jsonl"
    path.write_text(first + "\n" + second + "\n")
    monkeypatch.setattr(shards, "SAMPLE_BYTES", 100)  # inside the first line
    tokens = sum(len(ids) for ids in sp.encode(json.loads(first)))
    assert shards._bytes_per_token(path, sp) == pytest.approx((len(first) + 1) / tokens)


def test_prepare_flags_come_from_prepare_options():
    """Every PrepareOptions field is a flag of ``prepare all`` with the field's default, so the CLI and the
    Python API cannot drift; a stage's subcommand takes only its own fields, the rest keep their defaults."""
    from data_tools.cli_options import options_from_args
    from data_tools.pipeline.options import PrepareOptions
    from data_tools.prepare import build_parser
    parser = build_parser()
    a = parser.parse_args(["all", "--input", "x", "--out", "o"])
    assert options_from_args(PrepareOptions, a) == DEFAULTS
    a = parser.parse_args(["all", "--input", "x", "--out", "o", "--format", "jsonl", "--no-dedupe", "--valid", "3",
                           "--seed", "7", "--shard-docs", "5", "--hf-tokenizer", "m"])
    assert options_from_args(PrepareOptions, a) == DEFAULTS.replace(fmt="jsonl", dedupe=False, valid=3, seed=7,
                                                                    shard_docs=5, hf_tokenizer="m")
    a = parser.parse_args(["split", "--out", "o", "--seed", "3"])
    assert options_from_args(PrepareOptions, a) == DEFAULTS.replace(seed=3) and not hasattr(a, "vocab_size")


def test_xpt_data_lists_and_runs_every_command():
    """``python -m data_tools`` is ``xpt-data``: its usage names every command, each command's --help works
    through it, and an unknown command is one error line."""
    from data_tools.cli import COMMANDS
    proc = cli("--help", module="data_tools")
    assert proc.returncode == 0, proc.stderr
    for name in COMMANDS:
        assert f"\n  {name} " in proc.stdout, name
        sub = cli(name, "--help", module="data_tools")
        assert sub.returncode == 0 and sub.stdout.startswith(f"usage: xpt-data {name}"), (name, sub.stderr)
    assert_one_line_error(cli("bogus", module="data_tools"), "unknown command 'bogus'", "prepare")


def test_the_top_help_points_to_the_flags():
    """`xpt-data prepare --help` shows the stages only; it says where the flags the README uses are listed."""
    top = cli("--help")
    assert top.returncode == 0 and "`xpt-data prepare all --help` lists every flag" in top.stdout
    flags = cli("all", "--help").stdout
    assert all(f in flags for f in ("--input", "--vocab-size", "--family", "--workers", "--shard-tokens"))


def test_an_out_folder_inside_the_input_folder_is_not_read_back(tmp_path, synthetic):
    """`--input dump --out dump/prepared`: a rerun read the first run's own corpus.jsonl, spm.model and shards as
    text (a changed corpus, or an invalid-UTF-8 error on spm.model); now it is up to date. A link to a directory
    or to nothing below the input is named, not silently passed over."""
    dump = tmp_path / "dump"
    dump.mkdir()
    shutil.copy(synthetic, dump / "corpus.txt")
    (dump / "gone").symlink_to(tmp_path / "nowhere")
    args = ("--input", dump, "--out", dump / "prepared", "--vocab-size", 300, "--valid", 0.1, "--test", 0.1,
            "--workers", 1)
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    assert "clean: 1 file(s)" in first.stderr
    assert f"clean: not followed: 1 link(s) to a directory or to nothing ({dump / 'gone'})" in first.stderr
    manifest = (dump / "prepared/manifest.json").read_bytes()
    again = cli(*args)
    assert again.returncode == 0, again.stderr
    assert "clean: up to date" in again.stderr and (dump / "prepared/manifest.json").read_bytes() == manifest
    from data_tools.pipeline.readers import expand_inputs  # the other way round: input below --out, all read
    (tmp_path / "o/raw").mkdir(parents=True)
    (tmp_path / "o/raw/x.txt").write_text("text\n")
    assert expand_inputs([tmp_path / "o/raw"], exclude=tmp_path / "o") == [tmp_path / "o/raw/x.txt"]


@pytest.mark.parametrize("family,spelled", [("bert", "[MASK]"), ("roberta", "<mask>")])
def test_a_special_token_spelled_in_the_text_becomes_unk_not_its_id(tmp_path, synthetic, family, spelled):
    """The mask is a SentencePiece user-defined symbol, which SentencePiece also matches in plain text: a literal
    "[MASK]" in the corpus became the mask id, and the trainer's MLM would then see a mask it never put there."""
    text = synthetic.read_text(encoding="utf-8")
    src = tmp_path / "corpus.txt"
    src.write_text(f"The token {spelled} stands for a word here.\n\n" + text, encoding="utf-8")
    out = tmp_path / "out"
    proc = cli("--input", src, "--out", out, "--vocab-size", 300, "--valid", 0, "--test", 0, "--family", family,
               "--workers", 1)
    assert proc.returncode == 0, proc.stderr
    assert "tokenize: 1 special token(s) spelled out in the text" in proc.stderr
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    special = {sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.piece_to_id(spelled)}
    manifest = json.loads((out / "manifest.json").read_text())
    indexes = [scan_shard(str(out / s)) for s in manifest["splits"]["train"]["shards"]]
    reader = DocReader(indexes)
    ids = np.concatenate([reader.read(s, d) for s, idx in enumerate(indexes) for d in range(len(idx.lengths))])
    assert not np.isin(ids, list(special)).any() and (ids == sp.unk_id()).sum() >= 1


def test_a_full_disk_is_one_line_naming_where_it_wrote(tmp_path, synthetic):
    """ENOSPC from a write to an open file names no file: the line says which --out it was writing (it said
    'No space left on device' alone). A real small tmpfs, filled to a few KiB."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and `mount -t tmpfs` for a real small filesystem")
    try:
        (disk / "filler").write_bytes(b"\0" * (1024 * 1024 - 16 * 1024))
        out = disk / "out"
        proc = cli("--input", synthetic, "--out", out, "--vocab-size", 300, "--workers", 1)
        line = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 2 and line.startswith("error: No space left on device") and str(out) in line, \
            proc.stderr[-2000:]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)
