"""data_tools' reading and cleaning side: input formats and compression, invalid UTF-8, sentence splitting
(the default splitter and a pluggable one), normalisation, de-duplication and length filters, and the
document-level train/valid/test split. The sharding side is test_data_tools.py."""
from __future__ import annotations

import bz2
import gzip
import json
from pathlib import Path

import pytest

from conftest import one_error_line_of, write_synthetic_corpus
from data_tools.errors import PrepareError
from data_tools.pipeline.clean.stage import clean
from data_tools.pipeline.options import DEFAULTS
from data_tools.pipeline.readers import detect_format, read_documents
from data_tools.pipeline.split import split
from data_tools.pipeline.state import SPLITS
from data_tools.pipeline.text import clean_document, clean_text, split_sentences
from data_tools_builders import cli

DOCS = [["대한민국은 동아시아에 있는 나라이다. 수도는 서울이다.", "인구는 약 5천만 명이다."],
        ["서울은 대한민국의 수도이다."],
        ["부산은 항구 도시이다.", "해운대가 유명하다!"]]
TITLES = ["대한민국", "서울", "부산"]


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


def test_json_lines_of_another_field_are_refused_not_read_as_text(tmp_path):
    """A dump whose JSON lines hold their text under another key (``{"id": 0, "content": ...}``, common in Hugging
    Face dumps), or whose first line is a header, was read as plain text: its JSON syntax went into the shards
    and prepare exited 0. It is JSON lines, and each line without a string "text" is a one-line error."""
    dump = tmp_path / "in" / "a.jsonl"
    dump.parent.mkdir()
    dump.write_text("".join(json.dumps({"id": i, "content": "\n".join(d)}, ensure_ascii=False) + "\n"
                            for i, d in enumerate(DOCS)), encoding="utf-8")
    (tmp_path / "in" / "b.txt").write_text(_text(DOCS), encoding="utf-8")
    assert detect_format(dump) == "jsonl"
    proc = cli("--input", tmp_path / "in", "--out", tmp_path / "out", "--vocab-size", 50, "--workers", 1)
    one_error_line_of(proc, f'{dump}:1: expected a JSON object with a string "text" field (its keys: id, content)')
    header = _write(tmp_path / "h.jsonl", json.dumps({"source": "dump"}) + "\n" + _jsonl(DOCS), None)
    with pytest.raises(PrepareError, match=r'h.jsonl:1: expected .* \(its keys: source\)'):
        list(read_documents(header))


def test_lone_carriage_returns_end_lines_and_hidden_files_are_named(tmp_path):
    """A file with classic Mac OS line ends (a lone CR) was one line, so one document; a hidden file below an
    input folder was left out without a word."""
    (tmp_path / "in" / ".cache").mkdir(parents=True)
    (tmp_path / "in" / "mac.txt").write_bytes(_text(DOCS).replace("\n", "\r").encode())
    (tmp_path / "in" / "unix.txt").write_bytes(_text(DOCS).encode())
    (tmp_path / "in" / ".hidden.txt").write_bytes(_text(DOCS).encode())
    (tmp_path / "in" / ".cache" / "x.txt").write_bytes(_text(DOCS).encode())
    assert list(read_documents(tmp_path / "in" / "mac.txt")) == list(read_documents(tmp_path / "in" / "unix.txt"))
    said = []
    from data_tools.pipeline.readers import expand_inputs
    assert expand_inputs([tmp_path / "in"], log=said.append) == [tmp_path / "in" / n for n in ("mac.txt", "unix.txt")]
    assert said == [f"left out: 2 hidden file(s) or folder(s), whose names start with '.' ({tmp_path / 'in/.cache'}, "
                    f"{tmp_path / 'in/.hidden.txt'})"]


@pytest.mark.parametrize("compress", [None, "gz"])
def test_invalid_utf8_names_file_and_line(tmp_path, compress):
    raw = "첫 문장이다.\n둘째 문장이다.\n".encode() + b"bad \xff\xfe byte\n" + "넷째.\n".encode()
    path = tmp_path / ("bad.txt.gz" if compress else "bad.txt")
    path.write_bytes(gzip.compress(raw) if compress else raw)
    proc = cli("--input", path, "--out", tmp_path / "out", "--vocab-size", 50, "--workers", 1)
    one_error_line_of(proc, f"{path}:3: invalid UTF-8")


@pytest.mark.parametrize("encoding,docs", [
    ("cp949", DOCS),  # older Korean text (a superset of EUC-KR)
    ("cp1251", [["Київ є столицею України. Він стоїть на Дніпрі."], ["Львів є містом на заході."]]),
])
def test_an_input_in_another_encoding_reads_as_its_utf8_copy_does(tmp_path, encoding, docs):
    """--encoding NAME decodes every input file with that codec, strictly: the same sentences as the UTF-8 copy of the
    text; read as UTF-8 the file is a one-line error that names --encoding; a rerun with another encoding is not
    'up to date'."""
    text = _text(docs)
    (tmp_path / "utf8.txt").write_text(text, encoding="utf-8")
    legacy = tmp_path / "legacy.txt"
    legacy.write_bytes(text.encode(encoding))
    clean([tmp_path / "utf8.txt"], tmp_path / "a")
    stats = clean([legacy], tmp_path / "b", DEFAULTS.replace(encoding=encoding))
    read = [(tmp_path / d / "sentences/corpus.jsonl").read_text(encoding="utf-8") for d in "ab"]
    assert read[0] == read[1] and stats["sentences"] > 0
    assert list(read_documents(legacy, encoding=encoding)) == list(read_documents(tmp_path / "utf8.txt"))
    proc = cli("--input", legacy, "--out", tmp_path / "c", "--vocab-size", 50, "--workers", 1)
    one_error_line_of(proc, f"{legacy}:1: invalid UTF-8 (byte 0x")
    assert "(text in another encoding: --encoding NAME)" in proc.stderr
    again = clean([legacy], tmp_path / "b", DEFAULTS.replace(encoding="latin-1"))  # another key: cleaned again
    assert not again.get("skipped") and clean([legacy], tmp_path / "b", DEFAULTS.replace(encoding="latin-1"))["skipped"]


@pytest.mark.parametrize("encoding,error", [
    ("no-such-codec", "--encoding no-such-codec: unknown encoding"),
    ("utf-16", "--encoding utf-16: lines are split on the byte 0x0a, which utf-16 does not write for a newline"),
])
def test_an_encoding_it_cannot_read_is_one_line(tmp_path, encoding, error):
    src = tmp_path / "a.txt"
    src.write_text(_text(DOCS), encoding="utf-8")
    proc = cli("--input", src, "--out", tmp_path / "out", "--vocab-size", 50, "--encoding", encoding)
    one_error_line_of(proc, error)


@pytest.mark.parametrize("encoding,error", [
    ("iso2022_kr", "--encoding iso2022_kr: iso2022_kr is stateful"),
    ("iso-2022-jp", "--encoding iso-2022-jp: iso2022_jp is stateful"),
    ("hz", "--encoding hz: hz is stateful"),
    ("utf-7", "--encoding utf-7: utf-7 is stateful"),
    ("rot13", "--encoding rot13: rot-13 is not an encoding of text files"),
])
def test_a_stateful_or_non_text_codec_is_one_line(tmp_path, encoding, error):
    """Stateful encodings passed the ASCII check but lines are decoded one by one: ISO-2022-KR's designation on
    line 1 is lost for every later line, whose Hangul came out as ASCII garbage, silently. rot13 was a
    LookupError traceback."""
    src = tmp_path / "a.txt"
    src.write_bytes(_text(DOCS).encode("iso2022_kr"))
    with pytest.raises(PrepareError) as e:
        clean([src], tmp_path / "out", DEFAULTS.replace(encoding=encoding))
    assert str(e.value).startswith(error) and "\n" not in str(e.value)


def test_utf8_sig_reads_as_utf8(tmp_path):
    """--encoding utf-8-sig was refused as "does not write 0x0a for a newline" (its encoder writes a BOM first)."""
    src = tmp_path / "bom.txt"
    src.write_bytes(_text(DOCS).encode("utf-8-sig"))
    clean([src], tmp_path / "a")
    clean([src], tmp_path / "b", DEFAULTS.replace(encoding="utf-8-sig"))
    read = [(tmp_path / d / "sentences/corpus.jsonl").read_text(encoding="utf-8") for d in "ab"]
    assert read[0] == read[1] and json.loads(read[0].splitlines()[0])[0] == DOCS[0][0].split(" 수도")[0]


def test_an_out_folder_that_is_an_input_folder_is_refused(tmp_path):
    """`--input same --out same`: the first run worked, and a re-run read its own outputs back as text
    (sentences/corpus.jsonl as a document of JSON lines, or an invalid-UTF-8 error on spm.model). So is an
    input inside --out's own sentences/ folder. A failed run leaves the folder as it was."""
    from data_tools.pipeline.run import run_pipeline
    same = tmp_path / "same"
    same.mkdir()
    (same / "a.txt").write_text(_text(DOCS), encoding="utf-8")
    with pytest.raises(PrepareError, match=r"^--out .*same is the input folder .*same: a re-run would read"):
        run_pipeline([same], same, valid=0, test=0)
    assert sorted(p.name for p in same.iterdir()) == ["a.txt"]
    clean([same / "a.txt"], same)  # a file of the folder is fine
    with pytest.raises(PrepareError, match=r"lies in --out .*same's own output folder sentences/"):
        clean([same / "sentences"], same)


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
    # other scripts' sentence ends (until 2026-12-04 none of these cut, and a paragraph past --max-chars was lost)
    ("मैं घर जा रहा हूँ। आप कहाँ हैं? वह यहाँ है॥ ठीक है।",
     ["मैं घर जा रहा हूँ।", "आप कहाँ हैं?", "वह यहाँ है॥", "ठीक है।"]),
    ("كيف حالك؟ أنا بخير. شكرا!", ["كيف حالك؟", "أنا بخير.", "شكرا!"]),
    ("میں گھر جا رہا ہوں۔ آپ کہاں ہیں؟", ["میں گھر جا رہا ہوں۔", "آپ کہاں ہیں؟"]),
    ("Ես տուն եմ գնում։ Դու որտե՞ղ ես։", ["Ես տուն եմ գնում։", "Դու որտե՞ղ ես։"]),
    ("ሰላም ነው። እንዴት ነህ፧", ["ሰላም ነው።", "እንዴት ነህ፧"]),
    ("ကျွန်တော် အိမ်ပြန်မယ်။ခင်ဗျား ဘယ်မှာလဲ။", ["ကျွန်တော် အိမ်ပြန်မယ်။", "ခင်ဗျား ဘယ်မှာလဲ။"]),
    ("Τι κάνεις; Καλά.", ["Τι κάνεις; Καλά."]),  # Greek ';' is also Latin's semicolon: not cut
])
def test_default_splitter(text, want):
    assert split_sentences(text) == want


def test_full_width_question_and_exclamation_marks_still_cut_after_nfkc():
    """NFKC makes ！ and ？ ASCII, which cut only before whitespace, and Japanese and Chinese put none: until
    2026-12-04 ``本当に？はい！`` stayed one sentence under the default normalisation. Between kana or Han they cut;
    in Latin text glued to a word they do not (``Yahoo!Japan``)."""
    for form in ("NFKC", "NFC"):
        assert clean_document(["本当に？はい！行きます。我很好！你呢？"], split_sentences, form)[0] == [
            clean_text(t, form) for t in ("本当に？", "はい！", "行きます。", "我很好！", "你呢？")]
    assert split_sentences("Yahoo!Japan is a site. Fine") == ["Yahoo!Japan is a site.", "Fine"]


def test_normalisation_and_whitespace():
    assert clean_text("정말요？\u3000네！\t\ufeff좋아\u200b요") == "정말요? 네! 좋아요"
    assert clean_text("ﾊﾝｶｸ ①", "NFKC") == "ハンカク 1"
    assert clean_text("ﾊﾝｶｸ", "NFC") == "ﾊﾝｶｸ"
    assert clean_text("e\u0301", "NFC") == "\u00e9" and clean_text("e\u0301", "none") == "e\u0301"
    # the invisible direction marks go (SentencePiece's nmt_nfkc made each a space inside a word); ZWJ stays
    assert clean_text("שלום\u200eabc\u200fדבר \u0643\u061c\u062a \u0915\u094d\u200d\u0937", "NFC") == \
        "שלוםabcדבר \u0643\u062a \u0915\u094d\u200d\u0937"


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
        one_error_line_of(cli("clean", "--input", src, "--out", tmp_path / f"e{workers}", "--workers", workers,
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
