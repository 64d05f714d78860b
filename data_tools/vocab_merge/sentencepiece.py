"""New pieces for a SentencePiece source (Llama 2, Mistral, Gemma), merged into its model proto as Chinese-LLaMA
does: train a target SentencePiece model of the source's type and normalisation on the target text, append the
pieces the source lacks to the source's ``tokenizer.model`` (type NORMAL), and give ``tokenizer.json`` the same
pieces with the same ids.

Scores, and why old text keeps its ids. A BPE-type model encodes by repeatedly joining the adjacent pair whose
joined piece scores highest; the new pieces score below every source piece, so on any text every join the source
would make still comes first, and a new piece forms only after that. In ``tokenizer.json`` (BPE with merges,
as transformers converts a SentencePiece BPE model) the new pieces' merges are appended after the source's, which
says the same. A unigram model picks the segmentation of highest total score among pieces that match the text;
the new pieces keep the target model's own log-probabilities. Either way a new piece can change a segmentation
only where it matches the text, and with the default filter every new piece holds a non-ASCII character (the
``▁`` space mark aside), so ASCII text (English, code) keeps every id. ``allow_ascii`` lifts the filter.

A new piece of a BPE-type model is added only if it is one character or splits into two pieces the merged model
already has, so that BPE can reach it. Deterministic: a fixed seed and thread count for the trainer.
"""
from __future__ import annotations

import io
from pathlib import Path

from data_tools.errors import PrepareError
from data_tools.pipeline.options import DEFAULTS
from data_tools.vocab_merge.fertility import encode
from data_tools.vocab_merge.source import Source, load_proto, pinned_vocab

SPACE = "\u2581"  # SentencePiece's whitespace mark
BUILTIN_NORMALIZERS = ("identity", "nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf")
UNIGRAM, BPE = 1, 2  # TrainerSpec.ModelType
# Options the target model copies from the source's trainer spec, so its pieces cut text the same way.
SPLITTING = ("split_by_unicode_script", "split_by_number", "split_by_whitespace", "split_digits",
             "treat_whitespace_as_suffix", "allow_whitespace_only_pieces", "max_sentencepiece_length")


def has_non_ascii(piece: str) -> bool:
    return any(ord(c) > 0x7F for c in piece.replace(SPACE, " "))


def train_target(source_proto, lines: list[str], vocab_size: int, seed: int = DEFAULTS.seed,
                 num_threads: int = DEFAULTS.spm_threads):
    """A target model (a proto) of the source's type and normalisation, at most ``vocab_size`` pieces."""
    import sentencepiece as spm
    spec, norm = source_proto.trainer_spec, source_proto.normalizer_spec
    if spec.model_type not in (UNIGRAM, BPE):
        raise PrepareError(f"the source's tokenizer.model is of type {spec.model_type} (char or word); "
                           "extend-vocab extends BPE and unigram models")
    spm.set_random_generator_seed(seed)
    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=buf, vocab_size=vocab_size, hard_vocab_limit=False,
            model_type="bpe" if spec.model_type == BPE else "unigram", character_coverage=0.9995,
            input_sentence_size=2_000_000, shuffle_input_sentence=True, num_threads=num_threads,
            max_sentence_length=16384, minloglevel=2, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
            unk_piece=spec.unk_piece or "<unk>",
            normalization_rule_name=norm.name if norm.name in BUILTIN_NORMALIZERS else "identity",
            add_dummy_prefix=norm.add_dummy_prefix, remove_extra_whitespaces=norm.remove_extra_whitespaces,
            **{k: getattr(spec, k) for k in SPLITTING})
    except RuntimeError as e:
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
        raise PrepareError(f"SentencePiece training on the target text failed: {msg.split('] ')[-1]}") from None
    from sentencepiece import sentencepiece_model_pb2 as pb2
    target = pb2.ModelProto()
    target.ParseFromString(buf.getvalue())
    return target


def choose_pieces(source_proto, target_proto, add: int, allow_ascii: bool) -> list[tuple[str, float]]:
    """(piece, target score) for up to ``add`` target pieces the source lacks: new single characters first (the
    pieces others are built from), then the rest in the target model's order."""
    normal = 1  # SentencePiece.Type.NORMAL
    have = {p.piece for p in source_proto.pieces}
    bpe = source_proto.trainer_spec.model_type == BPE
    ordered = sorted((p for p in target_proto.pieces if p.type == normal), key=lambda p: len(p.piece) > 1)
    chosen: list[tuple[str, float]] = []
    for p in ordered:
        if len(chosen) == add:
            break
        piece = p.piece
        if piece in have or not (allow_ascii or has_non_ascii(piece)):
            continue
        if bpe and len(piece) > 1 and not any(piece[:k] in have and piece[k:] in have for k in range(1, len(piece))):
            continue  # BPE could never form it
        have.add(piece)
        chosen.append((piece, p.score))
    return chosen


def merged_proto(source_proto, pieces: list[tuple[str, float]]):
    from sentencepiece import sentencepiece_model_pb2 as pb2
    merged = pb2.ModelProto()
    merged.CopyFrom(source_proto)
    lowest = min(p.score for p in source_proto.pieces)
    bpe = source_proto.trainer_spec.model_type == BPE
    for k, (piece, score) in enumerate(pieces):
        merged.pieces.add(piece=piece, score=lowest - 1 - k if bpe else score, type=1)
    merged.trainer_spec.vocab_size = len(merged.pieces)
    return merged


def extend(source: Source, lines: list[str], add: int, allow_ascii: bool, out: Path) -> tuple[dict, list[str]]:
    """Writes OUT/tokenizer.model; returns (the merged tokenizer.json as a dict, the new pieces in id order)."""
    proto = load_proto(source.spm_model)
    chars = len({c for line in lines for c in line})
    target = train_target(proto, lines, vocab_size=2 * add + chars + 1)
    pieces = choose_pieces(proto, target, add, allow_ascii)
    merged = merged_proto(proto, pieces)
    (out / "tokenizer.model").write_bytes(merged.SerializeToString(deterministic=True))
    backend = dict(source.backend)
    model = backend["model"] = dict(source.backend["model"])
    names = [p for p, _ in pieces]
    if model["type"] == "Unigram":
        model["vocab"] = list(model["vocab"]) + [[p.piece, p.score] for p in merged.pieces[source.size:]]
    elif model["type"] == "BPE":
        model["vocab"] = {**pinned_vocab(source.backend), **{p: source.size + i for i, p in enumerate(names)}}
        model["merges"] = list(model["merges"]) + _merges_of(names, model["vocab"], model["merges"])
    else:
        raise PrepareError(f"--source {source.name}: its tokenizer.json model is {model['type']}, not the BPE or "
                           "Unigram that transformers makes of a SentencePiece model")
    return backend, names


def _merges_of(pieces: list[str], vocab: dict[str, int], source_merges: list) -> list:
    """Every split of each new piece into two pieces of the merged vocabulary, as transformers' converter makes
    them from a SentencePiece BPE model (piece by piece in score order, shorter left part first)."""
    as_strings = bool(source_merges) and isinstance(source_merges[0], str)  # older tokenizer.json: "a b"
    out = []
    for piece in pieces:
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                out.append(f"{left} {right}" if as_strings else [left, right])
    return out


def agreement(model: Path, tok, lines: list[str]) -> dict:
    """Lines on which the merged tokenizer.model (SentencePiece itself) and tokenizer.json (transformers) give
    different ids: a BPE converted to merges is not always SentencePiece's score order (ties, later joins)."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(model))
    differ = sum(a != b for a, b in zip(sp.encode(lines), encode(tok, lines)))
    return {"lines": len(lines), "lines_differing": differ}
