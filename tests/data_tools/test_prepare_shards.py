"""What `prepare` puts in the shards beyond the format (test_data_tools.py): the text a Hugging Face tokenizer
encodes, the normaliser SentencePiece is trained with, a given --tokenizer, and one-line errors for a sentences
file edited by hand."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from conftest import write_synthetic_corpus
from data_tools.errors import PrepareError
from data_tools.pipeline import shards
from data_tools.pipeline.run import run_pipeline
from data_tools.pipeline.split import split
from data_tools.pipeline.spm.trainer import _trainer_options

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "is", "and", "to", "big", "small"]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return write_synthetic_corpus(tmp_path_factory.mktemp("synth") / "corpus.txt", docs=40, seed=5)


def _shard_docs(out: Path) -> tuple[list[list[str]], list[list[int]]]:
    """The train split's documents (sentences) and the ids its shards hold for each."""
    manifest = json.loads((out / "manifest.json").read_text())
    docs = [json.loads(line) for line in (out / "sentences/train.jsonl").read_text(encoding="utf-8").splitlines()]
    ids = []
    for name in manifest["splits"]["train"]["shards"]:
        with tarfile.open(out / name) as tar:
            ids += [np.load(io.BytesIO(tar.extractfile(m).read())).tolist() for m in tar.getmembers()]
    return docs, ids


def _byte_level_bpe(path: Path, sentences: list[str]) -> Path:
    """A GPT-2-style tokenizer (byte-level BPE, add_prefix_space=False): a word's leading space is in its piece."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(sentences, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                           show_progress=False,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                            unk_token="<|endoftext|>").save_pretrained(path)
    return path


def test_a_byte_level_bpe_keeps_the_space_between_sentences(tmp_path, monkeypatch):
    """Sentences were encoded one by one and concatenated: a byte-level BPE gives a sentence's first word no
    leading space, so "dog. Is" was stored as "dog.Is". A document is now its text in one call; shards of the
    old writer (its key's version) are rewritten by a re-run."""
    from transformers import AutoTokenizer
    rng = np.random.default_rng(0)
    sentences = [" ".join(rng.choice(WORDS, rng.integers(3, 9))).capitalize() + "." for _ in range(60)]
    tok_dir = _byte_level_bpe(tmp_path / "tok", sentences)
    text = tmp_path / "en.txt"
    text.write_text("\n\n".join(" ".join(sentences[d * 3:d * 3 + 3]) for d in range(20)) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    run_pipeline([text], out, hf_tokenizer=str(tok_dir), valid=0, test=0, shard_docs=5)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    docs, ids = _shard_docs(out)
    assert len(docs) == len(ids) == 20 and sum(map(len, docs)) > 40
    for doc, got in zip(docs, ids):
        assert tok.decode(got) == " ".join(doc)  # "dog. Is", not "dog.Is"
        assert got == tok(" ".join(doc), add_special_tokens=False)["input_ids"]
    assert json.loads((out / "manifest.json").read_text())["writer_version"] == 3
    monkeypatch.setattr(shards, "HF_WRITER_VERSION", 2)  # shards keyed as the writer before version 3 keyed them
    run_pipeline([text], out, hf_tokenizer=str(tok_dir), valid=0, test=0, shard_docs=5)
    monkeypatch.undo()
    again = run_pipeline([text], out, hf_tokenizer=str(tok_dir), valid=0, test=0, shard_docs=5)
    assert again["tokenize"]["written_shards"] == 4  # every shard of the old writer is rewritten


def test_sentencepiece_shards_keep_their_bytes_and_keys(tmp_path, synthetic):
    """Version 3 changed Hugging Face shards only: a SentencePiece document is still its sentences' ids
    concatenated, and its key's writer version is still 2, so an earlier run's shards stay complete."""
    out = tmp_path / "out"
    run_pipeline([synthetic], out, vocab_size=300, valid=0, test=0)
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    docs, ids = _shard_docs(out)
    assert ids == [[i for s in sp.encode(doc) for i in s] for doc in docs]
    assert shards.writer_version(sp) == 2 and json.loads((out / "manifest.json").read_text())["writer_version"] == 2


@pytest.mark.parametrize("normalize,rule", [("NFC", "identity"), ("none", "identity"), ("NFKC", "nmt_nfkc")])
def test_the_normalisation_reaches_the_shards(tmp_path, synthetic, normalize, rule):
    """--normalize NFC / none left full-width letters, circled digits and ligatures in the sentences, and
    SentencePiece's default nmt_nfkc folded them in every shard all the same."""
    lines = synthetic.read_text(encoding="utf-8").split("\n")
    src = tmp_path / "fw.txt"
    src.write_text("\n".join(ln.replace(".", " ｆｕｌｌ ① ﬁ.") if ln else ln for ln in lines), encoding="utf-8")
    out = tmp_path / "out"
    run_pipeline([src], out, vocab_size=200, valid=0, test=0, normalize=normalize)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((out / "spm.model").read_bytes())
    assert proto.normalizer_spec.name == rule
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    text = sp.decode(_shard_docs(out)[1][0])
    assert ("ｆｕｌｌ ① ﬁ." in text) == (normalize != "NFKC") and ("full 1 fi." in text) == (normalize == "NFKC")


def test_a_given_tokenizer_is_loaded_before_it_is_copied(tmp_path, synthetic):
    """--tokenizer with a file that is not a SentencePiece model was a traceback, after it had replaced
    OUT/spm.model (a good one of an earlier run, the old manifest still beside it)."""
    out = tmp_path / "out"
    run_pipeline([synthetic], out, vocab_size=300, valid=0.1, test=0.1)
    model = (out / "spm.model").read_bytes()
    bogus = tmp_path / "bogus.model"
    bogus.write_text("not a model\n")
    with pytest.raises(PrepareError, match=r"bogus\.model: not a SentencePiece model \(") as e:
        run_pipeline([synthetic], out, tokenizer=str(bogus), valid=0.1, test=0.1)
    assert "\n" not in str(e.value) and (out / "spm.model").read_bytes() == model


def test_the_model_of_an_earlier_run_as_its_tokenizer(tmp_path, synthetic):
    """--tokenizer OUT/spm.model, re-running with the model the first run trained, was an error ("are the same
    file"); it is up to date."""
    out = tmp_path / "out"
    run_pipeline([synthetic], out, vocab_size=300, valid=0.1, test=0.1)
    model, manifest = (out / "spm.model").read_bytes(), (out / "manifest.json").read_bytes()
    again = run_pipeline([synthetic], out, tokenizer=str(out / "spm.model"), valid=0.1, test=0.1)
    assert (out / "spm.model").read_bytes() == model and (out / "manifest.json").read_bytes() == manifest
    assert again["tokenize"]["written_shards"] == 0


def test_a_blank_line_in_a_sentences_file_is_one_line_naming_it(tmp_path):
    """A hand-written sentences/corpus.jsonl (or train.jsonl) with a blank line ended `prepare split` in a
    JSONDecodeError traceback, and the tokenize stage in a ValueError the CLI did not catch."""
    out = tmp_path / "out"
    (out / "sentences").mkdir(parents=True)
    corpus = out / "sentences/corpus.jsonl"
    corpus.write_text('["a b c.", "d e."]\n\n["f g."]\n', encoding="utf-8")
    with pytest.raises(PrepareError, match=r"corpus\.jsonl:2: a blank line"):
        split(out)
    corpus.write_text('["a b c.", "d e."]\n{"text": "f g."}\n', encoding="utf-8")
    with pytest.raises(PrepareError, match=r"corpus\.jsonl:2: not a JSON list of sentences"):
        split(out)
    train = out / "sentences/train.jsonl"
    train.write_text('["a b c."]\n["d e."]\n\n', encoding="utf-8")
    with pytest.raises(PrepareError, match=r"train\.jsonl:3: a blank line"):
        shards.plan_split(out, "train", train, out / "spm.model", "0", 100, None, None, 1)


def test_byte_fallback_spells_what_the_vocabulary_lacks_in_bytes(tmp_path, synthetic):
    """`prepare --byte-fallback` (as Llama-style tokenizers are trained): a character left out of the vocabulary
    (here by --character-coverage) is its UTF-8 bytes in the shards, not <unk>, so the text comes back whole; the
    stage's key holds the option, so a re-run without it trains again (and here finds that the corpus, without the
    256 byte pieces, supports fewer pieces)."""
    lines = synthetic.read_text(encoding="utf-8").split("\n")
    src = tmp_path / "rare.txt"
    src.write_text("\n".join(ln.replace(".", " ✓.", 1) if ln else ln for ln in lines), encoding="utf-8")
    out = tmp_path / "out"
    stats = run_pipeline([src], out, vocab_size=450, valid=0, test=0, character_coverage=0.98, byte_fallback=True)
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    docs, ids = _shard_docs(out)
    flat = [i for doc in ids for i in doc]
    assert sp.unk_id() not in flat and any(sp.is_byte(i) for i in flat)
    assert sp.decode(ids[0]) == " ".join(docs[0]) and "✓" in sp.decode(flat)
    assert not stats["spm"].get("skipped")
    again = run_pipeline([src], out, vocab_size=450, valid=0, test=0, character_coverage=0.98, byte_fallback=True)
    assert again["spm"].get("skipped")
    with pytest.raises(PrepareError, match="--vocab-size 450 is more than this corpus supports"):
        run_pipeline([src], out, vocab_size=450, valid=0, test=0, character_coverage=0.98)
    # Off, the flag is not passed at all: SentencePiece writes a flag passed as false into the model, whose bytes
    # (and the sha256 manifests record) would differ from every earlier run's for the same corpus.
    assert "byte_fallback" not in _trainer_options(300, "roberta", "unigram", 0, 1, 0.9995)
