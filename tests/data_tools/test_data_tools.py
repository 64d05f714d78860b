"""data_tools, the writer side of docs/shard_format.md: SentencePiece, parallel/resumable sharding and the manifest,
checked against the reader (``xpt_ds.data.shards``), and the CLI. Reading and cleaning text: test_data_text.py;
help, usage lines and an empty input: test_data_cli.py."""
from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from conftest import one_error_line_of, small_tmpfs, write_synthetic_corpus
from data_tools_builders import cli
from data_tools.pipeline.options import DEFAULTS
from data_tools.pipeline.readers import read_documents
from data_tools.pipeline.shards import id_dtype, write_shard
from data_tools.pipeline.state import SPLITS
from data_tools.pipeline.run import run_pipeline
from xpt_ds.data.shards import DocReader, scan_shard


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
    from xpt_ds.data.manifest import expand_shards
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
    one_error_line_of(proc, "train-000099.tar")
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
    one_error_line_of(cli("--input", tmp_path / "missing.txt", "--out", out), "input not found", "missing.txt")
    (tmp_path / "empty.txt").write_text("\n\n  \n")
    one_error_line_of(cli("--input", tmp_path / "empty.txt", "--out", out), "empty input")
    few = tmp_path / "few.txt"
    few.write_text("첫째 문서이다.\n\n둘째 문서이다.\n\n셋째 문서이다.\n", encoding="utf-8")  # 3 documents
    one_error_line_of(cli("--input", few, "--out", out, "--valid", 1, "--test", 2),
                          "too few documents: 3 documents cannot give 1 valid + 2 test")
    line = one_error_line_of(cli("--input", synthetic, "--out", out, "--vocab-size", 20000, "--workers", 1),
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
        one_error_line_of(cli("--input", synthetic, "--out", tmp_path / "out"), "another data_tools.cli.prepare")


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
    proc = cli("--out", tmp_path / "out", "--data-dir", data, module="data_tools.cli.uagec")
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
    from data_tools.typed_options import options_from_args
    from data_tools.pipeline.options import PrepareOptions
    from data_tools.cli.prepare import build_parser
    parser = build_parser()
    a = parser.parse_args(["all", "--input", "x", "--out", "o"])
    assert options_from_args(PrepareOptions, a) == DEFAULTS
    a = parser.parse_args(["all", "--input", "x", "--out", "o", "--format", "jsonl", "--no-dedupe", "--valid", "3",
                           "--seed", "7", "--shard-docs", "5", "--hf-tokenizer", "m"])
    assert options_from_args(PrepareOptions, a) == DEFAULTS.replace(fmt="jsonl", dedupe=False, valid=3, seed=7,
                                                                    shard_docs=5, hf_tokenizer="m")
    a = parser.parse_args(["split", "--out", "o", "--seed", "3"])
    assert options_from_args(PrepareOptions, a) == DEFAULTS.replace(seed=3) and not hasattr(a, "vocab_size")


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
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        (disk / "filler").write_bytes(b"\0" * (1024 * 1024 - 16 * 1024))
        out = disk / "out"
        proc = cli("--input", synthetic, "--out", out, "--vocab-size", 300, "--workers", 1)
        line = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 2 and line.startswith("error: No space left on device") and str(out) in line, \
            proc.stderr[-2000:]


def test_sentences_sentencepiece_leaves_out_and_unk_tokens_are_said(tmp_path, synthetic, capsys):
    """A paragraph the splitter cannot cut (no sentence punctuation, as in Thai) past SentencePiece's 16,384 bytes
    is left out of its training, and a character only it holds becomes unk in the shards: until 2026-12-04 the
    log said every sentence was trained on, and nothing counted the unk."""
    from data_tools.pipeline import log
    text = synthetic.read_text(encoding="utf-8")
    long = " ".join(["ลองดู"] * 3000) + " ๑๒๓"  # 16,804 bytes of Thai, and digits found nowhere else
    src = tmp_path / "corpus.txt"
    src.write_text(text + "\n\n" + long + "\n", encoding="utf-8")
    quiet = log._quiet
    log.set_quiet(False)
    try:
        _run(src, tmp_path / "out", valid=0, test=0, max_chars=0)
    finally:
        log.set_quiet(quiet)
    err = capsys.readouterr().err
    assert "spm: warning: 1 of the " in err and "are longer than 16384 bytes, which SentencePiece leaves out" in err
    split = json.loads((tmp_path / "out/manifest.json").read_text())["splits"]["train"]
    assert split["unk_tokens"] >= 1 and f"tokenize: warning: train {split['unk_tokens']} (" in err


def test_a_vocabulary_below_the_least_says_the_least(tmp_path):
    """Checked before the train split is read: the line gives the bound, not only that the size is too small."""
    from data_tools.errors import PrepareError
    from data_tools.pipeline.options import PrepareOptions
    from data_tools.pipeline.spm.stage import train_tokenizer
    with pytest.raises(PrepareError, match=r"^--vocab-size 5 is too small: it must be at least 8$"):
        train_tokenizer(tmp_path, PrepareOptions(vocab_size=5))


def test_sentencepieces_advice_names_xpt_datas_own_flag(tmp_path):
    """More distinct characters than the vocabulary holds (Korean at a small --vocab-size): SentencePiece's error
    advises its own '--character_coverage'; the line says prepare's '--character-coverage'."""
    from data_tools.errors import PrepareError
    from data_tools.pipeline.spm.trainer import train_spm_from_sentences
    syllables = [chr(0xAC00 + i) for i in range(700)]
    sentences = [" ".join(syllables[i:i + 20]) for i in range(0, 700, 5)] * 3
    with pytest.raises(PrepareError, match=r"^SentencePiece training failed: Vocabulary size is smaller than "
                                           r"required_chars\. 300 vs \d+\. .* with --character-coverage option"):
        train_spm_from_sentences(iter(sentences), tmp_path / "spm", 300, "roberta", "unigram", seed=0, num_threads=1)
