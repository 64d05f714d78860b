"""embedding_init subword_mean: known means on hand-built sources of three kinds (byte-level BPE as GPT-2's,
SentencePiece BPE as Llama 2's, both its legacy normaliser and transformers' Metaspace form, WordPiece as BERT's),
for a SentencePiece target (XPT) and for an extended byte-level target (extend); report counts, reruns, errors."""
from __future__ import annotations

import io

import pytest
import torch

from xpt_ds.config import ConfigError
from xpt_ds.config.embedding_args import check_args
from xpt_ds.data.tokenizer import build_hf_tokenizer, build_tokenizer
from xpt_ds.embedding_init.context import InitContext
from xpt_ds.embedding_init.registry import init_embeddings
from xpt_ds.embedding_init.strategies import _byte_decoder
from xpt_ds.embedding_init.subword_mean import target_bytes

TARGET_TEXT = ["при прийти привіт світ світло при пори мори", "прийти при привіт гори пори"] * 30
LETTERS = sorted(set("".join(TARGET_TEXT)) - {" "})
HIDDEN = 4
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A 40-piece SentencePiece BPE target in RoBERTa's layout; it holds ▁при, ри, ори, ▁світ, ▁світло, ▁, ..."""
    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TARGET_TEXT), model_writer=model, vocab_size=40,
                                   model_type="bpe", character_coverage=1.0, pad_id=1, bos_id=0, eos_id=2, unk_id=3,
                                   user_defined_symbols=["<mask>"], minloglevel=2)
    path = tmp_path_factory.mktemp("target") / "spm.model"
    path.write_bytes(model.getvalue())
    return build_tokenizer(str(path))


def _alpha(text: str) -> str:
    """``text``'s UTF-8 bytes in GPT-2's byte alphabet (Ġ for a space)."""
    enc = {b: c for c, b in _byte_decoder().items()}
    return "".join(enc[b] for b in text.encode())


def _chains(units: list[str], words: list[list[str]], vocab: dict, merges: list) -> None:
    """Vocabulary entries for ``units``, then left-to-right merges building each word from its units."""
    for u in units:
        vocab.setdefault(u, len(vocab))
    for parts in words:
        cur = parts[0]
        for p in parts[1:]:
            merges.append((cur, p))
            cur += p
            vocab.setdefault(cur, len(vocab))


def _save(backend, out, **specials):
    from transformers import PreTrainedTokenizerFast
    PreTrainedTokenizerFast(tokenizer_object=backend, **specials).save_pretrained(str(out))
    return out


def byte_level(out, words=(" п", "ри", " с", "ві"), extra=()):
    """GPT-2's kind: 256 bytes, each Cyrillic letter's two bytes merged, then ``words`` (and ``extra``) merged
    from letters, in that order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    vocab, merges = {s: i for i, s in enumerate(SPECIALS)}, []
    _chains(sorted(_byte_decoder()), [list(_alpha(c)) for c in LETTERS], vocab, merges)
    _chains([], [[_alpha(c) for c in w] for w in words] + [list(e) for e in extra], vocab, merges)
    backend = Tokenizer(models.BPE(vocab, merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return _save(backend, out, bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>",
                 unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")


def sentencepiece(out, legacy: bool):
    """Llama 2's kind: <unk> <s> </s>, 256 byte-fallback pieces, ▁ and letters, then ▁п, ри, ▁с, ві. ``legacy``:
    Llama 2's tokenizer.json (a normaliser prepends ▁ and turns spaces into ▁: " при" is ▁▁при); else the
    Metaspace pre-tokenizer transformers 5 builds from a tokenizer.model (" при" is ▁при)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    vocab = {s: i for i, s in enumerate(["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)])}
    merges = []
    _chains(["▁", "a"] + LETTERS, [["▁", "п"], ["р", "и"], ["▁", "с"], ["в", "і"]], vocab, merges)
    backend = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if legacy:
        backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    else:
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    return _save(backend, out, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def wordpiece(out):
    """BERT's kind, without the letter л: п, ##ри, с, ##ві and every other letter both ways."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    letters = [c for c in LETTERS if c != "л"]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *(f"##{c}" for c in letters), "##ри", "##ві"]
    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return _save(backend, out, cls_token="[CLS]", sep_token="[SEP]", unk_token="[UNK]", pad_token="[PAD]",
                 mask_token="[MASK]")


HASHES = [("#", "#"), ("##", "#")]  # ## and ###, as byte-level vocabularies hold (markdown, code)
SOURCES = {"byte_level": lambda out: byte_level(out, extra=HASHES), "sp_legacy": lambda out: sentencepiece(out, True),
           "sp_metaspace": lambda out: sentencepiece(out, False), "wordpiece": wordpiece}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    cache = {}

    def get(kind):
        if kind not in cache:
            cache[kind] = SOURCES[kind](tmp_path_factory.mktemp(kind))
        return cache[kind]
    return get


def _ctx(tok, source, seed: int = 5) -> InitContext:
    from transformers import AutoTokenizer
    rows = len(AutoTokenizer.from_pretrained(source))
    emb = torch.arange(rows * HIDDEN, dtype=torch.float32).reshape(rows, HIDDEN) / 8  # row j: 4j/8 ... exact
    return InitContext(tok, emb, str(source), torch.Generator().manual_seed(seed), 0.02, {})


def _row_of(ctx, tokens: list[str]) -> torch.Tensor:
    ids = ctx.source_tokenizer.convert_tokens_to_ids(tokens)
    return ctx.source_embeddings[ids].double().mean(0).float()


# target piece -> the source tokens it must average: a word-initial piece has the source's own word start
# (Ġ, ▁, or a plain WordPiece token), a word-internal one has none (WordPiece: ## tokens)
KNOWN = {
    "byte_level": {"▁при": [_alpha(" п"), _alpha("ри")], "ри": [_alpha("ри")], "ори": [_alpha("о"), _alpha("ри")],
                   "▁світ": [_alpha(" с"), _alpha("ві"), _alpha("т")], "▁": ["Ġ"]},
    "sp_legacy": {"▁при": ["▁п", "ри"], "ри": ["ри"], "ори": ["о", "ри"], "▁світ": ["▁с", "ві", "т"], "▁": ["▁"]},
    "wordpiece": {"▁при": ["п", "##ри"], "ри": ["##ри"], "ори": ["##о", "##ри"], "▁світ": ["с", "##ві", "##т"]},
}
KNOWN["sp_metaspace"] = KNOWN["sp_legacy"]


@pytest.mark.parametrize("kind", list(SOURCES))
def test_known_means(target, sources, kind):
    ctx = _ctx(target, sources(kind))
    matrix, report = init_embeddings("subword_mean", {}, ctx)
    for piece, tokens in KNOWN[kind].items():
        i = next(i for i in range(target.vocab_size) if target.piece(i) == piece)
        assert torch.equal(matrix[i], _row_of(ctx, tokens)), (piece, tokens)
    assert matrix[target.pad_id].abs().sum() == 0
    one = next(i for i in range(target.vocab_size) if target.piece(i) == "ри")  # a source token: its row exactly
    assert torch.equal(matrix[one], ctx.source_embeddings[ctx.source_tokenizer.convert_tokens_to_ids(
        KNOWN[kind]["ри"][0])])
    examples = {e["piece"]: e["source"] for e in report["examples"].get("combined", [])}
    assert examples.get("▁при", KNOWN[kind]["▁при"]) == KNOWN[kind]["▁при"]


def test_report_counts_and_fallback(target, sources):
    """Byte-level: every piece has text, so every row is the source's (17 pieces are one source token, 18 are
    several). WordPiece without л: ▁світло is [UNK], л and ло have no ## match, ▁ alone is no WordPiece text:
    they fall back."""
    _, report = init_embeddings("subword_mean", {}, _ctx(target, sources("byte_level")))
    assert (report["copied"], report["combined"], report["special"], report["fallback"], report["zero"]) == \
        (17, 18, 4, 0, 1)
    ctx = _ctx(target, sources("wordpiece"))
    matrix, report = init_embeddings("subword_mean", {}, ctx)
    fallback = {target.piece(i) for i in range(target.vocab_size) if "л" in target.piece(i)}
    assert fallback == {"▁світло", "ло", "л"} and report["fallback"] == 4
    assert {e["piece"] for e in report["examples"]["fallback"]} == fallback | {"▁"}
    assert report["special"] == 4 and report["copied"] + report["combined"] == 40 - 5 - 4


def test_reruns_are_bitwise_identical(target, sources):
    first = init_embeddings("subword_mean", {}, _ctx(target, sources("wordpiece")))
    again = init_embeddings("subword_mean", {}, _ctx(target, sources("wordpiece")))
    assert torch.equal(first[0], again[0]) and first[1] == again[1]


def test_extended_byte_level_target(tmp_path, sources):
    """extend: the target is the source's tokenizer plus merges; the old rows are the source's, bit for bit, and
    Ġпри (ĠÐ¿ + ÑĢÐ¸) is the mean of the source's Ġп and ри."""
    source = sources("byte_level")
    ext = byte_level(tmp_path / "ext", extra=HASHES + [(_alpha(" п"), _alpha("ри"))])
    tok = build_hf_tokenizer(str(ext))
    ctx = _ctx(tok, source)
    assert len(ctx.source_embeddings) == tok.vocab_size - 1
    matrix, report = init_embeddings("subword_mean", {}, ctx)
    new = tok.vocab_size - 1
    assert tok.piece(new) == _alpha(" при")
    assert torch.equal(matrix[new], _row_of(ctx, [_alpha(" п"), _alpha("ри")]))
    old = [i for i in range(new) if i not in tok.special_ids]
    assert torch.equal(matrix[old], ctx.source_embeddings[old])
    assert (report["copied"], report["combined"]) == (len(old), 1)


def test_a_byte_level_source_with_hash_tokens_is_byte_level(target, sources):
    """The byte-level source holds ## and ### (as SmolLM2's and GPT-2's vocabularies do): its style is still
    byte-level, not WordPiece, so overlap_copy gives ▁п the row of Ġп, not of the word-internal letter п."""
    from xpt_ds.embedding_init.strategies import tokenizer_style
    ctx = _ctx(target, sources("byte_level"))
    assert "###" in ctx.source_tokenizer.get_vocab() and tokenizer_style(ctx.source_tokenizer) == "byte_bpe"
    matrix, _ = init_embeddings("overlap_copy", {}, ctx)
    i = next(i for i in range(target.vocab_size) if target.piece(i) == "▁п")
    assert torch.equal(matrix[i], _row_of(ctx, [_alpha(" п")]))


def test_target_bytes_of_each_marker_style():
    assert target_bytes("▁при", "sentencepiece") == (True, "при".encode())
    assert target_bytes("<0xD0>", "sentencepiece") == (False, b"\xd0")
    assert target_bytes(_alpha(" при"), "byte_level") == (True, "при".encode())
    assert target_bytes(_alpha("п")[:1], "byte_level") == (False, b"\xd0")
    assert target_bytes("##ри", "wordpiece") == (False, "ри".encode())
    assert target_bytes("при", "wordpiece") == (True, "при".encode())


def test_a_source_without_tokenizer_is_one_line(tmp_path, target):
    (tmp_path / "config.json").write_text("{}")
    ctx = InitContext(target, torch.zeros(10, HIDDEN), str(tmp_path), torch.Generator(), 0.02, {})
    with pytest.raises(ConfigError) as e:
        init_embeddings("subword_mean", {}, ctx)
    assert "model.source" in str(e.value) and "\n" not in str(e.value)


def test_takes_no_options():
    assert check_args("subword_mean", {}) == {}
    with pytest.raises(ConfigError, match="'model.embedding_init_args.top_k'"):
        check_args("subword_mean", {"top_k": 3})


def wordpiece_marks(out):
    """BERT's kind with punctuation marks and CJK characters both as words and as ``##`` continuations, as BERT's
    vocabulary has them; running text never holds ``##,``: BERT's pre-tokenizer cuts each mark and CJK character
    off as a word of its own (its ``##,`` row is never trained)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    marks = [",", ")", "'", "中", "国", "s"]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *LETTERS, *(f"##{c}" for c in LETTERS), "##ри",
              *marks, *(f"##{m}" for m in marks)]
    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return _save(backend, out, cls_token="[CLS]", sep_token="[SEP]", unk_token="[UNK]", pad_token="[PAD]",
                 mask_token="[MASK]")


@pytest.mark.parametrize("text, tokens", [
    (",", [","]), ("),", [")", ","]), ("中国", ["中", "国"]), ("'s", ["'", "s"]), ("ри", ["##ри"]),
    ("ри,", ["##ри", ","]), ("Ри", ["##ри"]),
])
def test_wordpiece_cuts_word_internal_text_as_running_text(tmp_path, text, tokens):
    """A word-internal piece is cut as BERT cuts it after a word: punctuation and CJK characters are words of their
    own (``x),`` is x ) ,), only the text the pre-tokenizer leaves in the word takes ``##`` tokens."""
    from transformers import AutoTokenizer

    from xpt_ds.embedding_init.subword_mean import SourceEncoder
    stok = AutoTokenizer.from_pretrained(wordpiece_marks(tmp_path / "wp"))
    assert stok.tokenize("п" + text)[1:] == tokens  # the source's own cut in running text
    ids = SourceEncoder(stok, len(stok)).encode_all([(False, text.encode())])[0]
    assert stok.convert_ids_to_tokens(ids) == tokens


def test_wordpiece_punctuation_gets_the_word_row(tmp_path):
    """The target's word-internal ``,`` (after ▁при) is the source's ``,`` in subword_mean and overlap_copy, not
    its never-trained ``##,``; the word-internal ``ри`` is still ``##ри``."""
    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["при, світ при", "світ, при світ"] * 30),
                                   model_writer=model, vocab_size=24, model_type="bpe", character_coverage=1.0,
                                   pad_id=1, bos_id=0, eos_id=2, unk_id=3, user_defined_symbols=["<mask>"],
                                   minloglevel=2)
    (tmp_path / "spm.model").write_bytes(model.getvalue())
    target = build_tokenizer(str(tmp_path / "spm.model"))
    pieces = {target.piece(i): i for i in range(target.vocab_size)}
    assert "," in pieces and "▁," not in pieces and "ри" in pieces
    source = wordpiece_marks(tmp_path / "wp")
    for init in ("subword_mean", "overlap_copy"):
        ctx = _ctx(target, source)
        matrix, _ = init_embeddings(init, {}, ctx)
        assert torch.equal(matrix[pieces[","]], _row_of(ctx, [","])), init
        assert torch.equal(matrix[pieces["ри"]], _row_of(ctx, ["##ри"])), init
