"""An export's tokenizer (``xpt_ds.data.tokenizer.save_hf_tokenizer``, loaded by stock ``AutoTokenizer``) encodes
and decodes text as its SentencePiece model does, for the models beyond ``prepare``'s default unigram one
(tests/data/test_data.py checks that one): a BPE model (``prepare --model-type bpe``, or a user's own), whose
export stopped in an AttributeError inside transformers' converter, and a model trained with ``byte_fallback``
(as Llama-style tokenizers are), whose export's tokenizer gave ``<unk>`` for every character the model spells in
byte pieces. Both until 2026-12-06."""
import pytest
import sentencepiece as spm
from test_given_tokenizer import own_spm
from transformers import AutoTokenizer

from xpt_ds.data.tokenizer import build_tokenizer, save_hf_tokenizer

RARE = ["😀", "Ω", "✓", "é", "ß"]  # characters the synthetic corpus never holds


@pytest.mark.parametrize("model_type,byte_fallback,vocab_size", [("bpe", False, 300), ("bpe", True, 500),
                                                                 ("unigram", True, 500)])
@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
def test_the_exported_tokenizer_encodes_and_decodes_as_its_sentencepiece_model(model_type, byte_fallback,
                                                                               vocab_size, causal, corpus_text,
                                                                               tmp_path):
    model = own_spm(corpus_text, tmp_path / "own", vocab_size=vocab_size, pad_id=3, model_type=model_type,
                    byte_fallback=byte_fallback, character_coverage=0.98, user_defined_symbols=["<mask>"])
    save_hf_tokenizer(build_tokenizer(str(model)), tmp_path / "hf", model_max_length=64, token_types=1,
                      causal=causal)
    hf = AutoTokenizer.from_pretrained(tmp_path / "hf")
    sp = spm.SentencePieceProcessor(model_file=str(model))
    lines = [x for x in corpus_text.read_text(encoding="utf-8").splitlines() if x][:40]
    lines += [f"{RARE[i % len(RARE)]}{line}  {RARE[(i + 1) % len(RARE)]} " for i, line in enumerate(lines)]
    byte_pieces = 0
    for line in lines:
        ids = sp.encode(line)
        assert hf(line, add_special_tokens=False)["input_ids"] == ids, line
        if byte_fallback:  # without it an unknown character decodes as SentencePiece's " ⁇ ", not as <unk>
            assert hf.decode(ids) == sp.decode(ids), line
        byte_pieces += sum(sp.is_byte(i) for i in ids)
    assert (byte_pieces > 0) == byte_fallback
