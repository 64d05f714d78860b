"""An export's tokenizer (``xpt_ds.data.tokenizer.save_hf_tokenizer``, loaded by stock ``AutoTokenizer``) encodes
and decodes text as its SentencePiece model does, for models trained otherwise than ``prepare``'s default unigram
one (tests/data/test_data.py checks that one), as a user's own often are (``xpt_ds.data.spm_backend``): a BPE model
(``prepare --model-type bpe``), whose export stopped in an AttributeError inside transformers' converter; byte
fallback (Llama-style), whose byte pieces became ``<unk>``; spaces kept (Llama-style), no dummy prefix
(Gemma-style), pieces across spaces, digits split one by one, each of which the exported tokenizer encoded
otherwise. All until 2026-12-06. A model that cannot be written so is refused when a run starts."""
from types import SimpleNamespace

import pytest
import sentencepiece as spm
from test_given_tokenizer import own_spm
from transformers import AutoTokenizer

from xpt_ds.config import ConfigError
from xpt_ds.data.tokenizer import build_tokenizer, save_hf_tokenizer, tokenizer_for

RARE = ["😀", "Ω", "✓", "é", "ß"]  # characters the synthetic corpus never holds
LLAMA = dict(byte_fallback=True, remove_extra_whitespaces=False, split_digits=True)
MODELS = {"bpe": ("bpe", 300, {}), "bpe-byte-fallback": ("bpe", 500, {"byte_fallback": True}),
          "unigram-byte-fallback": ("unigram", 500, {"byte_fallback": True}), "bpe-llama-style": ("bpe", 500, LLAMA),
          "unigram-no-dummy-prefix": ("unigram", 500, {**LLAMA, "add_dummy_prefix": False}),
          "unigram-across-spaces": ("unigram", 250, {"split_by_whitespace": False})}


def _texts(corpus_text) -> list[str]:
    """Lines of the corpus, then the same with rare characters, digits, and leading, trailing and repeated spaces."""
    lines = [x for x in corpus_text.read_text(encoding="utf-8").splitlines() if x][:40]
    return lines + [f"{' ' * (i % 3)}{RARE[i % len(RARE)]}{line.replace(' ', '  ', 1)} {i * 37}.{i} "
                    f"{RARE[(i + 1) % len(RARE)]}{' ' * (i % 2)}" for i, line in enumerate(lines)]


@pytest.mark.parametrize("name", MODELS)
def test_the_exported_tokenizer_encodes_and_decodes_as_its_sentencepiece_model(name, corpus_text, tmp_path):
    """A decoder's export (an encoder's differs only in what it puts around a text, not in how it encodes it)."""
    model_type, vocab_size, options = MODELS[name]
    model = own_spm(corpus_text, tmp_path / "own", vocab_size=vocab_size, pad_id=3, model_type=model_type,
                    character_coverage=0.98, user_defined_symbols=["<mask>"], **options)
    save_hf_tokenizer(build_tokenizer(str(model)), tmp_path / "hf", model_max_length=64, token_types=1, causal=True)
    hf = AutoTokenizer.from_pretrained(tmp_path / "hf")
    sp = spm.SentencePieceProcessor(model_file=str(model))
    byte_pieces = 0
    for text in _texts(corpus_text):
        ids = sp.encode(text)
        assert hf(text, add_special_tokens=False)["input_ids"] == ids, text
        if sp.unk_id() not in ids:  # SentencePiece decodes an unknown piece as " ⁇ ", the tokenizer as <unk>
            assert hf.decode(ids) == sp.decode(ids), text
        byte_pieces += sum(sp.is_byte(i) for i in ids)
    assert (byte_pieces > 0) == options.get("byte_fallback", False)


@pytest.mark.parametrize("options,why", [({"treat_whitespace_as_suffix": True}, "it marks a word's end"),
                                         ({"model_type": "char"}, "its model type is char")])
def test_a_model_no_tokenizer_encodes_alike_is_refused_when_a_run_starts(options, why, corpus_text, tmp_path):
    """Said with the run's tokenizer, before training, rather than by an export that encodes otherwise (or, for a
    char model, stops in the converter)."""
    model = own_spm(corpus_text, tmp_path / "own", pad_id=3, user_defined_symbols=["<mask>"], **options)
    with pytest.raises(ConfigError, match=r"^config key 'model.tokenizer': .* cannot be written as an export's "
                                          f"Hugging Face tokenizer that encodes as it does: {why}"):
        tokenizer_for(SimpleNamespace(method="xpt", tokenizer=str(model), mask_token=""), causal=True)
