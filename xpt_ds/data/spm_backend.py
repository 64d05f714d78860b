"""A SentencePiece model as the ``tokenizers`` backend of an export's tokenizer (``tokenizer.save_hf_tokenizer``),
encoding text as ``SentencePieceProcessor.encode`` does, by the model's own settings. transformers' ``SpmConverter``
builds it for the default settings (unigram, a dummy prefix, extra whitespace removed); a model trained otherwise,
as a user's own often is, got a tokenizer that encoded text otherwise than training had (until 2026-12-06):

- BPE (``prepare --model-type bpe``, Llama-style models): the converter stopped in an AttributeError (transformers
  5.25); its merges are made here (``_bpe``);
- ``byte_fallback`` (Llama-style): a character the vocabulary lacks is ``<0xNN>`` byte pieces, which the converter
  left out (``<unk>``);
- ``add_dummy_prefix`` off (Gemma-style): every text had a "▁" put before it;
- ``remove_extra_whitespaces`` off (Llama-style): leading and repeated spaces were dropped;
- ``split_by_whitespace`` off: no piece spanned a space; ``split_digits``: digits were not split one by one.

A model whose whitespace marker is a suffix, or unescaped, is refused (``unconvertible``) when a run starts."""
from __future__ import annotations

import types
import warnings


def read_proto(path: str):
    from sentencepiece import sentencepiece_model_pb2
    proto = sentencepiece_model_pb2.ModelProto()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def unconvertible(proto) -> str | None:
    """Why ``spm_backend`` cannot write this model as a tokenizer that encodes as it does; None: it can."""
    spec, norm = proto.trainer_spec, proto.normalizer_spec
    if spec.model_type not in (1, 2):
        return f"its model type is {spec.ModelType.Name(spec.model_type).lower()} (unigram and bpe convert)"
    if spec.treat_whitespace_as_suffix:
        return "it marks a word's end, not its start (treat_whitespace_as_suffix)"
    if not norm.escape_whitespaces:
        return "it keeps spaces unescaped (escape_whitespaces false)"
    return None


def spm_backend(path: str):
    """The ``tokenizers`` backend of the SentencePiece model at ``path`` (see the module's docstring)."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers
    from transformers.convert_slow_tokenizer import SpmConverter

    class Converter(SpmConverter):
        def tokenizer(self, proto):
            return super().tokenizer(proto) if proto.trainer_spec.model_type != 2 else _bpe(proto)

    with warnings.catch_warnings():  # "... uses the byte fallback option which is not implemented": it is, below
        warnings.filterwarnings("ignore", message=".*byte fallback option")
        converter = Converter(types.SimpleNamespace(vocab_file=path))
    spec, norm = converter.proto.trainer_spec, converter.proto.normalizer_spec
    converter.handle_byte_fallback = spec.byte_fallback
    backend = converter.converted()
    if spec.byte_fallback or not norm.add_dummy_prefix or not spec.split_by_whitespace:
        # Text back as SentencePiece's decode gives it: byte pieces <0xE2><0x9C><0x93> as their character, a space
        # for each "▁" inside a piece too (one spanning words), and the first one dropped only where the model put
        # a dummy prefix. The converter's Metaspace decoder (kept for the default settings) did none of these.
        backend.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), *([decoders.ByteFallback()] if spec.byte_fallback else []), decoders.Fuse(),
             *([decoders.Strip(content=" ", left=1, right=0)] if norm.add_dummy_prefix else [])])

    precompiled = [normalizers.Precompiled(norm.precompiled_charsmap)] if norm.precompiled_charsmap else []
    if not norm.remove_extra_whitespaces:  # every space kept; a leading one is a "▁" beside the dummy prefix's
        lead = [normalizers.Replace(Regex(r"\A "), "  ")] if norm.add_dummy_prefix else []
        backend.normalizer = normalizers.Sequence(precompiled + lead)
    elif not norm.add_dummy_prefix:  # the converter's leaves leading spaces to the prefix, which is not put here
        backend.normalizer = normalizers.Sequence(precompiled + [normalizers.Strip(left=True, right=True),
                                                                 normalizers.Replace(Regex(" {2,}"), "▁")])
    # The converter's Metaspace prepends "▁" to every span of text, the one right after a special token included:
    # "<mask>으로" gave <mask> ▁ 으로, a sequence training never shows the model (masking "▁국민" in "국민으로" gives
    # <mask> 으로). "first" prepends it only at the start of a sequence, as SentencePiece does (transformers' own
    # converters do the same for non-legacy tokenizers).
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first" if norm.add_dummy_prefix else
                                         "never", split=spec.split_by_whitespace)
    backend.pre_tokenizer = metaspace if not spec.split_digits else pre_tokenizers.Sequence(
        [metaspace, pre_tokenizers.Digits(individual_digits=True)])
    return backend


def _bpe(proto):
    """A SentencePiece BPE model's ``tokenizers`` BPE: SentencePiece merges the adjacent pair whose joined piece
    scores highest, so every split of a normal piece into two normal pieces is a merge, ranked by that piece's score
    (then its id). Control and user-defined pieces are added tokens, whole, as ``SpmConverter`` adds them for
    unigram models."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import BPE

    normal = {p.piece: (p.score, i) for i, p in enumerate(proto.pieces) if p.type == 1}
    ranked = sorted((-score, i, piece[:k], piece[k:]) for piece, (score, i) in normal.items()
                    for k in range(1, len(piece)) if piece[:k] in normal and piece[k:] in normal)
    spec = proto.trainer_spec
    backend = Tokenizer(BPE({p.piece: i for i, p in enumerate(proto.pieces)}, [(a, b) for *_, a, b in ranked],
                            unk_token=spec.unk_piece, fuse_unk=True, byte_fallback=spec.byte_fallback, dropout=None))
    backend.add_tokens([AddedToken(p.piece, normalized=False, special=p.type == 3)
                        for p in proto.pieces if p.type in (3, 4)])
    return backend
