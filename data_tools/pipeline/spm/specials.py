"""A pad or mask piece added to a SentencePiece model of one's own, after its last piece: every id it had stays,
so it encodes any text as before. SentencePiece's defaults (as Llama-style tokenizers are trained) have no pad,
which a run's rows need, and no mask piece, which an encoder's masked LM needs (``given``); retraining would give
another vocabulary. The pad is a control piece (never in encoded text) and becomes the model's ``pad_id``; the
mask is a user-defined piece, as ``prepare``'s own models hold it (``layouts``)."""
from __future__ import annotations

from pathlib import Path

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import SpmTokenizer
from data_tools.pipeline.shards import whole_file

CONTROL, USER_DEFINED = 3, 4  # sentencepiece_model.proto's ModelProto.SentencePiece.Type


def add_specials(model: Path, out: Path, pad: str | None = None, mask: str | None = None) -> dict[str, int]:
    """``model`` with ``pad`` and/or ``mask`` appended, written to ``out`` (whole, or not at all); their ids.
    A model that has a pad already, or a piece of either name, is a ``PrepareError``."""
    from sentencepiece import sentencepiece_model_pb2
    if pad is None and mask is None:
        raise PrepareError("nothing to add: give --pad, --mask or both")
    tok = SpmTokenizer(model)  # one line for a missing file or one that is not a model
    if pad is not None and tok.sp.pad_id() >= 0:
        raise PrepareError(f"{model} has a pad already: {tok.sp.id_to_piece(tok.sp.pad_id())!r} "
                           f"(id {tok.sp.pad_id()})")
    for name, piece in (("--pad", pad), ("--mask", mask)):
        if piece is not None and (not piece or tok.sp.piece_to_id(piece) != tok.sp.unk_id()
                                  or piece == tok.sp.id_to_piece(tok.sp.unk_id())):
            raise PrepareError(f"{name} {piece!r}: {model} holds that piece already" if piece else
                               f"{name}: an empty piece")
    if pad is not None and pad == mask:
        raise PrepareError(f"--pad and --mask are the same piece {pad!r}")
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.read_bytes())
    ids = {}
    for name, piece, kind in (("pad", pad, CONTROL), ("mask", mask, USER_DEFINED)):
        if piece is not None:
            proto.pieces.add(piece=piece, score=0.0, type=kind)
            ids[name] = len(proto.pieces) - 1
    if "pad" in ids:
        proto.trainer_spec.pad_id, proto.trainer_spec.pad_piece = ids["pad"], pad
    proto.trainer_spec.vocab_size = len(proto.pieces)
    out.parent.mkdir(parents=True, exist_ok=True)
    with whole_file(out) as f:
        f.write(proto.SerializeToString())
    return ids
