"""003's [lang->en][lang] transfer (method keep_vocab): shards from the source's own Hugging Face tokenizer,
the source's embeddings and LM head kept, the export shipping that tokenizer; bits per character."""
from __future__ import annotations

import hashlib
import io
import json
import math
import shutil
import tarfile

import numpy as np
import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertConfig, BertForMaskedLM, BertTokenizerFast

from conftest import REPO, TINY, base_config, free_port, launch, run_main, write_config
from xpt_ds.config import ConfigError, ModelConfig
from xpt_ds.data.manifest import expand_shards
from xpt_ds.metrics.mlm import MLMStats, piece_chars
from xpt_ds.data.tokenizer import build_hf_tokenizer, build_tokenizer, tokenizer_for

WORDS = ("the a of and to in is was for on with as by at from that this it be are or an were which "
         "city river house school music water world light stone garden winter summer north south old new "
         "small great early late people language history story").split()
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _vocab() -> list[str]:
    return list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", *LETTERS,
                               *(f"##{c}" for c in LETTERS), *WORDS, "##ing", "##ed"]))


def _text(path, docs: int = 30, seed: int = 0):
    """Latin-script documents of vocabulary words plus unknown words (split into letters by WordPiece)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    lines = []
    for _ in range(docs):
        for _ in range(rng.integers(3, 7)):
            words = list(rng.choice(WORDS, rng.integers(4, 12), p=p))
            words.insert(int(rng.integers(0, len(words))), "".join(rng.choice(list(LETTERS), 5)))  # unknown word
            lines.append(" ".join(words).capitalize() + ".")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bert_with_tokenizer(tmp_path_factory):
    """A tiny BERT (2 layers, hidden 64) with a WordPiece tokenizer saved next to it, as on the hub."""
    out = tmp_path_factory.mktemp("bert_tok")
    vocab = out / "vocab.txt"
    vocab.write_text("\n".join(_vocab()) + "\n")
    tok = BertTokenizerFast(vocab={p: i for i, p in enumerate(_vocab())}, do_lower_case=True, model_max_length=78)
    assert len(tok) == len(_vocab())
    tok.save_pretrained(out)
    torch.manual_seed(3)
    BertForMaskedLM(BertConfig(**{**TINY, "vocab_size": len(tok)}, pad_token_id=0)).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def hf_corpus(tmp_path_factory, bert_with_tokenizer):
    from data_tools.pipeline.run import run_pipeline
    root = tmp_path_factory.mktemp("hf_corpus")
    text = _text(root / "text.txt")
    stats = run_pipeline([text], root / "data", vocab_size=50, valid=0.1, test=0.1, seed=0,
                         hf_tokenizer=str(bert_with_tokenizer))
    return root / "data", stats


def _shard_docs(path) -> list[np.ndarray]:
    with tarfile.open(path) as tar:
        return [np.load(io.BytesIO(tar.extractfile(m).read())) for m in tar.getmembers()]


def test_prepare_with_hf_tokenizer_writes_its_ids(hf_corpus, bert_with_tokenizer):
    data, stats = hf_corpus
    tok = AutoTokenizer.from_pretrained(bert_with_tokenizer)
    manifest = json.loads((data / "manifest.json").read_text())
    assert stats["spm"]["skipped"] and not (data / "spm.model").exists()
    assert manifest["tokenizer_kind"] == "huggingface" and manifest["vocab_size"] == len(tok)
    assert manifest["tokenizer"] == str(bert_with_tokenizer.resolve())
    files = {n: hashlib.sha256((bert_with_tokenizer / n).read_bytes()).hexdigest()
             for n in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")}
    assert manifest["tokenizer_files"] == files
    assert manifest["tokenizer_sha256"] == hashlib.sha256(
        "".join(f"{n}:{s}\n" for n, s in sorted(files.items())).encode()).hexdigest()
    ours = build_hf_tokenizer(str(bert_with_tokenizer))  # data_tools' and the trainer's hashes agree
    assert (manifest["tokenizer_content_sha256"], manifest["tokenizer_text_sha256"]) == (ours.content_sha256,
                                                                                        ours.text_sha256)
    for split in ("train", "valid", "test"):
        docs = [json.loads(line) for line in (data / "sentences" / f"{split}.jsonl").read_text().splitlines()]
        ids = [d for s in manifest["splits"][split]["shards"] for d in _shard_docs(data / s)]
        assert len(ids) == len(docs) > 0
        for got, sentences in zip(ids, docs):
            want = [i for s in sentences for i in tok(s, add_special_tokens=False)["input_ids"]]
            assert got.tolist() == want
            assert " ".join(tok.convert_ids_to_tokens(got.tolist())).replace(" ##", "") == \
                " ".join(tok.tokenize(" ".join(sentences))).replace(" ##", "")
    all_ids = np.concatenate(ids)
    assert len(set(all_ids.tolist())) > 40 and (all_ids == tok.unk_token_id).mean() < 0.01  # real words, not [UNK]
    assert not set(all_ids.tolist()) & {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id,
                                                     tok.mask_token_id}
    from data_tools.pipeline.run import run_pipeline  # a re-run is up to date: no shard rewritten
    again = run_pipeline([data.parent / "text.txt"], data, vocab_size=50, valid=0.1, test=0.1, seed=0,
                         hf_tokenizer=str(bert_with_tokenizer))
    assert again["tokenize"]["written_shards"] == 0


def test_hf_shards_stay_apart_from_spm_shards(hf_corpus, corpus, tmp_path):
    """An HF manifest with a SentencePiece run and vice versa, or another HF tokenizer: one line naming it."""
    data, _ = hf_corpus
    with pytest.raises(ConfigError) as e:
        expand_shards([f"{data}/manifest.json:train"], build_tokenizer(str(corpus / "spm.model")))
    assert "huggingface" in str(e.value) and str(data / "manifest.json") in str(e.value) and "\n" not in str(e.value)
    hf = build_hf_tokenizer(str(json.loads((data / "manifest.json").read_text())["tokenizer"]))
    with pytest.raises(ConfigError) as e:
        expand_shards([f"{corpus}/manifest.json:train"], hf)
    assert "sentencepiece" in str(e.value) and "\n" not in str(e.value)
    other = hf.__class__(**{**hf.__dict__, "path": "other-tok", "content_sha256": "0" * 64, "text_sha256": "1" * 64})
    with pytest.raises(ConfigError) as e:
        expand_shards([f"{data}/manifest.json:train"], other)
    assert "other-tok" in str(e.value) and "\n" not in str(e.value) and "before 2026-12-04" not in str(e.value)
    # another post-processor (a decoder's export puts bos first), the same text sha256: the same ids for text
    exported = hf.__class__(**{**hf.__dict__, "path": "exported-tok", "content_sha256": "0" * 64})
    assert expand_shards([f"{data}/manifest.json:train"], exported)
    older = tmp_path / "older"  # a manifest written before the text sha256: one line that says what to do
    shutil.copytree(data, older)
    meta = json.loads((older / "manifest.json").read_text())
    del meta["tokenizer_text_sha256"]
    (older / "manifest.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError) as e:
        expand_shards([f"{older}/manifest.json:train"], exported)
    assert "exported-tok" in str(e.value) and "run the same xpt-data prepare command again" in str(e.value)


def test_unknown_hf_tokenizer_is_one_line_naming_it(tmp_path, tiny_bert):
    with pytest.raises(ConfigError) as e:
        tokenizer_for(ModelConfig(source=str(tiny_bert), tokenizer=str(tmp_path / "no_such_tok"), method="keep_vocab"))
    msg = str(e.value)
    assert "model.tokenizer" in msg and str(tmp_path / "no_such_tok") in msg and "\n" not in msg


def test_keep_vocab_cli_error_names_missing_tokenizer(tmp_path, hf_corpus, bert_with_tokenizer):
    data, _ = hf_corpus
    cfg = _config(tmp_path, bert_with_tokenizer, data)
    cfg["model"]["tokenizer"] = str(tmp_path / "missing_tok")
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and str(tmp_path / "missing_tok") in lines[0], proc.stderr[-2000:]


def test_keep_vocab_keeps_source_weights_bitwise(bert_with_tokenizer):
    from xpt_ds.model.build import build_model
    cfg = ModelConfig(source=str(bert_with_tokenizer), tokenizer="", method="keep_vocab")
    built = build_model(cfg, tokenizer_for(cfg))
    src = BertForMaskedLM.from_pretrained(bert_with_tokenizer)
    got, want = built.model.state_dict(), src.state_dict()
    assert got.keys() == want.keys() and built.model.config.num_hidden_layers == src.config.num_hidden_layers
    for name in want:
        assert torch.equal(got[name], want[name]), name
    assert built.tags["bert.embeddings.word_embeddings.weight"] >= {"@source", "@embeddings"}
    assert not [n for n, t in built.tags.items() if "@new" in t]


def test_keep_vocab_refuses_a_source_whose_head_is_untied(tmp_path, bert_with_tokenizer):
    """An encoder target ties its LM head to its word rows; a source that unties them has a head matrix of its
    own, which keep_vocab would silently drop: one line naming the source instead."""
    import shutil

    from xpt_ds.model.build import build_model
    untied = tmp_path / "untied"
    shutil.copytree(bert_with_tokenizer, untied)
    config = json.loads((untied / "config.json").read_text())
    (untied / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    cfg = ModelConfig(source=str(untied), tokenizer="", method="keep_vocab")
    with pytest.raises(ConfigError) as e:
        build_model(cfg, tokenizer_for(cfg))
    assert str(e.value).startswith("config key 'model.method': keep_vocab keeps the source's word rows") and \
        f"but {untied}'s config.json unties its head (tie_word_embeddings: false)" in str(e.value)


def _config(tmp_path, source, data):
    return base_config(tmp_path / "run", source, data,
                       model={"source": str(source), "tokenizer": "", "method": "keep_vocab"},
                       phases=[{"name": "mlm", "steps": 3, "lr": 5e-4, "warmup_steps": 1}],
                       deepspeed=str(REPO / "ds_configs/zero1_fp32.json"))


def test_keep_vocab_run_export_loads_with_stock_transformers(tmp_path, hf_corpus, bert_with_tokenizer):
    from xpt_ds.cli.evaluate import main as evaluate_main
    from xpt_ds.cli.export import main as export_main
    data, _ = hf_corpus
    cfg_path = write_config(tmp_path / "cfg.yaml", _config(tmp_path, bert_with_tokenizer, data))
    proc = launch(["--config", str(cfg_path)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "export"
    assert export_main(["--run", str(tmp_path / "run"), "--out", str(out)]) == 0

    tok = AutoTokenizer.from_pretrained(out)
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "BertTokenizer"  # the source's
    source_tok = AutoTokenizer.from_pretrained(bert_with_tokenizer)
    text = "The old house of music stood by the river zzqx."
    assert tok(text)["input_ids"] == source_tok(text)["input_ids"]
    assert tok.mask_token_id == source_tok.mask_token_id and len(tok) == len(source_tok)
    model = AutoModelForMaskedLM.from_pretrained(out).eval()
    assert model.config.xpt_method == "keep_vocab" and model.config.vocab_size == len(source_tok)
    ids = torch.tensor([tok(text)["input_ids"], tok("A new school in the north was early.", padding="max_length",
                                                     max_length=len(tok(text)["input_ids"]))["input_ids"]])
    with torch.no_grad():
        exported = model(input_ids=ids).logits
    torch.save(ids, str(tmp_path / "logits.pt") + ".ids.pt")
    one_rank = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(free_port())}  # a world of one, forked (no launcher, no interpreter's imports)
    runner = run_main("trainer_logits", [str(cfg_path), str(tmp_path / "logits.pt")], env=one_rank)
    assert runner.returncode == 0, runner.stderr[-3000:]
    torch.testing.assert_close(exported, torch.load(tmp_path / "logits.pt"), atol=1e-5, rtol=0)
    assert not torch.equal(model.bert.embeddings.word_embeddings.weight,
                           BertForMaskedLM.from_pretrained(bert_with_tokenizer).bert.embeddings.word_embeddings.weight)

    results = {}
    for flag, value in (("--run", tmp_path / "run"), ("--model", out)):
        res = tmp_path / f"eval{flag}.json"
        assert evaluate_main([flag, str(value), "--shards", f"{data}/manifest.json:valid", "--seq-len", "32",
                              "--out", str(res)]) == 0
        results[flag] = json.loads(res.read_text())
    r = results["--model"]
    assert {"loss", "ppl", "hits@1", "mrr", "mr", "tokens", "bits_per_char", "chars"} <= r.keys()
    assert r["chars"] > r["tokens"] > 0
    assert math.isclose(r["bits_per_char"], r["loss"] * r["tokens"] / math.log(2) / r["chars"], rel_tol=1e-9)
    assert math.isclose(results["--run"]["loss"], r["loss"], rel_tol=1e-5) and results["--run"]["chars"] == r["chars"]


def test_piece_chars_three_marker_styles():
    # SentencePiece: '▁' is the one space it replaces
    assert [piece_chars(p, "sentencepiece") for p in ["▁the", "ing", "▁", "▁Київ"]] == [4, 3, 1, 5]
    # byte-level BPE: 'Ġ' is a space; 'Ð¿' is the two bytes of Cyrillic 'п' (one character), and a character
    # split over two pieces counts on the piece with its first byte
    assert [piece_chars(p, "byte_level") for p in ["Ġthe", "ing", "Ġ", "ĠÐ¿", "Ð", "¿"]] == [4, 3, 1, 2, 1, 0]
    # WordPiece: '##' removed, word-initial pieces count one space
    assert [piece_chars(p, "wordpiece") for p in ["the", "##ing", "a", "##s", "київ"]] == [4, 3, 2, 1, 5]
    # the three spellings of " the city" + "s" all count 10 characters
    assert sum(piece_chars(p, "sentencepiece") for p in ["▁the", "▁city", "s"]) == 10
    assert sum(piece_chars(p, "byte_level") for p in ["Ġthe", "Ġcity", "s"]) == 10
    assert sum(piece_chars(p, "wordpiece") for p in ["the", "city", "##s"]) == 10
    with pytest.raises(ValueError, match="unknown marker style"):
        piece_chars("x", "bpe")


def test_wordpiece_punctuation_counts_no_space_of_its_own():
    """BERT splits punctuation off as a piece of its own (``city.`` is ``city`` ``.``), which sits against a word:
    the pieces of a text with brackets, quotes and full stops sum to its characters and bytes, with the one
    space before each word. Until 2026-12-04 every punctuation piece counted a space too (4 % too many
    characters on UA-GEC's test text), which made keep_vocab's bits per character too low."""
    from transformers import BertTokenizerFast

    from xpt_ds.metrics.mlm import piece_bytes
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "river", "##s", "місто", "так", "(", ")", ".",
             ",", "«", "»", "!", "-"]
    bert = BertTokenizerFast(vocab={w: i for i, w in enumerate(words)}, do_lower_case=True)
    text = "the rivers (місто), «так»! the river."
    pieces = bert.tokenize(text)
    assert pieces == ["the", "river", "##s", "(", "місто", ")", ",", "«", "так", "»", "!", "the", "river", "."]
    assert sum(piece_chars(p, "wordpiece") for p in pieces) == len(" " + text)  # the space before the text
    assert sum(piece_bytes(p, "wordpiece") for p in pieces) == len((" " + text).encode())
    # punctuation standing between spaces is the case it misses, by its one space: " a - b" counts 5 of 6
    assert sum(piece_chars(p, "wordpiece") for p in ["the", "-", "river"]) == len(" the - river") - 1


def test_byte_fallback_pieces_count_the_characters_and_bytes_they_spell():
    """A SentencePiece model with byte fallback (Llama 2's, Mistral's, Gemma's layout) spells a character it has no
    piece for as its UTF-8 bytes, ``<0xEA>`` ``<0xB0>`` ``<0x80>`` for '가': one character, counted on its first
    byte, and three bytes. Until 2026-12-04 each such piece counted 6 characters, the letters of its name."""
    import sentencepiece as spm
    from xpt_ds.metrics.mlm import piece_bytes
    assert [piece_chars(p, "sentencepiece") for p in ["▁", "<0xEA>", "<0xB0>", "<0x80>", "<0x41>"]] == [1, 1, 0, 0, 1]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([" ".join(WORDS[i:] + WORDS[:i]) for i in range(60)]), model_writer=buf,
        vocab_size=300, byte_fallback=True, hard_vocab_limit=False, num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    text = "the river 가을 київ Straße 🙂 north"
    pieces = sp.encode(text, out_type=str)
    assert sum(p.startswith("<0x") for p in pieces) >= 10, pieces
    assert sum(piece_chars(p, "sentencepiece") for p in pieces) == len(" " + text)  # the dummy prefix's space
    assert sum(piece_bytes(p, "sentencepiece") for p in pieces) == len((" " + text).encode("utf-8"))


def test_bits_per_char_from_stats():
    chars = torch.tensor([1.0, 4.0, 2.0, 3.0])
    stats = MLMStats(char_lengths=chars)
    logits = torch.zeros(3, 4)  # uniform: NLL ln 4 = 2 bits per masked piece
    stats.update(logits, torch.tensor([1, 3, -100]))
    r = stats.result()
    assert r["chars"] == 7 and r["tokens"] == 2
    assert math.isclose(r["bits_per_char"], 2 * 2 / 7, rel_tol=1e-6)  # fp32 cross-entropy
    plain = MLMStats()
    plain.update(logits, torch.tensor([1, 3, -100]))
    assert "bits_per_char" not in plain.result() and plain.result()["loss"] == r["loss"]


def test_probe_scores_a_keep_vocab_run(tmp_path, hf_corpus, bert_with_tokenizer):
    """A keep_vocab run has no spm.model: the probe reads the checkpoint's Hugging Face tokenizer for the target
    shards and also scores the post-trained model with its own (the source's, trained) vocabulary."""
    from conftest import run_main
    data, _ = hf_corpus
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", _config(tmp_path, bert_with_tokenizer, data)))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = _text(tmp_path / "source.txt", docs=8, seed=1)
    out = run_main("xpt_ds.cli.probe", ["--run", str(tmp_path / "run"), "--source-text", str(text), "--target-shards",
                                    f"{data}/manifest.json:valid", "--seq-len", "32"])
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout)["rows"]
    assert list(rows) == ["source model, source vocabulary",  # no ITLs
                          "post-trained, the source's untrained rows swapped back in",
                          "post-trained, its own vocabulary (the source's, trained)",
                          "post-trained, its own vocabulary (target text)"]
    assert all(r["tokens"] > 0 and r["ppl"] > 1 for r in rows.values())
    n = rows["source model, source vocabulary"]["tokens"]
    assert rows["post-trained, its own vocabulary (the source's, trained)"]["tokens"] == n  # the same masks
    assert rows["post-trained, its own vocabulary (the source's, trained)"]["loss"] != \
        rows["post-trained, the source's untrained rows swapped back in"]["loss"]  # trained rows against the source's


def test_hf_shards_of_the_old_writer_are_named_in_a_warning(hf_corpus, bert_with_tokenizer, tmp_path, caplog):
    """Shards ``prepare --hf-tokenizer`` wrote before writer version 3 lack the space between sentences under a
    byte-level BPE: the run says so once, naming the manifest; a manifest of today's writer gets no such line."""
    import shutil
    data, _ = hf_corpus
    tok = build_hf_tokenizer(str(bert_with_tokenizer))
    old = tmp_path / "old"
    shutil.copytree(data, old)
    meta = json.loads((old / "manifest.json").read_text())
    assert meta["writer_version"] == 3
    del meta["writer_version"]
    (old / "manifest.json").write_text(json.dumps(meta))
    with caplog.at_level("WARNING", logger="xpt_ds.data.manifest"):
        assert expand_shards([f"{data}/manifest.json:train"], tok)
        assert not [r for r in caplog.records if "before 2026-12-03" in r.getMessage()]
        for _ in range(2):
            assert expand_shards([f"{old}/manifest.json:train", f"{old}/manifest.json:valid"], tok)
    said = [r.getMessage() for r in caplog.records if "before 2026-12-03" in r.getMessage()]
    assert len(said) == 1 and str(old / "manifest.json") in said[0] and "run the same prepare command" in said[0]
