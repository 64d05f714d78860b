"""A SentencePiece model given with ``--tokenizer`` instead of trained: checked before any stage reads text, for
what training with it and exporting the result need. A model trained with SentencePiece's defaults (pad_id -1, no
mask piece, as Llama-style tokenizers are) was copied, the corpus cleaned, split and tokenized with it, and only
then did the trainer refuse it (``specials`` adds a pad to such a model). The trainer's own checks are
``xpt_ds.data.tokenizer.build_tokenizer`` and ``xpt_ds.data.spm_backend.unconvertible`` (the two packages never
import each other; tests/data_tools/test_given_tokenizer.py holds them to the same answers)."""
from __future__ import annotations

from pathlib import Path

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import SpmTokenizer

# SentencePiece's special ids (``<name>_id``, -1 where a model has none) the trainer reads: a document starts with
# bos and ends with eos, a batch's rows are padded with pad, and unk is what the shards hold for an unknown piece.
NEEDED = ("pad", "bos", "eos", "unk")
MASK_PIECES = ("<mask>", "[MASK]")  # the trainer's default candidates (model.mask_token names another piece)


def given_tokenizer(path: Path | str) -> SpmTokenizer:
    """The model at ``path``; a missing file, one that is not a SentencePiece model, or one without a special id
    of ``NEEDED`` is a one-line ``PrepareError``."""
    path = Path(path)
    if not path.is_file():
        raise PrepareError(f"tokenizer not found: {path}")
    tok = SpmTokenizer(path)
    why = _unconvertible(path)
    if why is not None:
        raise PrepareError(f"--tokenizer {path}: a run's export could not write it as a Hugging Face tokenizer that "
                           f"encodes as it does: {why}")
    missing = [name for name in NEEDED if getattr(tok.sp, f"{name}_id")() < 0]
    if missing:
        ids = ", ".join(f"{name}_id" for name in missing)
        raise PrepareError(f"--tokenizer {path} has no {' or '.join(missing)} piece ({ids} -1), which training "
                           "needs (documents start with bos and end with eos, rows are padded with pad): "
                           + (f"add one after its last piece, no id changing (xpt-data spm-specials --tokenizer {path} "
                              "--out NEW.model --pad '<pad>'), " if missing == ["pad"] else "")
                           + f"train it again with {ids} set (spm_train --{missing[0]}_id=N ...), or leave "
                           "--tokenizer out and prepare trains one (--family)")
    return tok


def has_mask_piece(tok: SpmTokenizer) -> bool:
    """Whether the model holds one of the trainer's default mask pieces."""
    return any(tok.sp.piece_to_id(piece) != tok.sp.unk_id() for piece in MASK_PIECES)


def _unconvertible(path: Path) -> str | None:
    """Why no ``tokenizers`` backend encodes as this model does (the trainer's ``xpt_ds.data.spm_backend.
    unconvertible``, which refuses it when a run starts); None: one does."""
    from sentencepiece import sentencepiece_model_pb2
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    spec = proto.trainer_spec
    if spec.model_type not in (1, 2):
        return f"its model type is {spec.ModelType.Name(spec.model_type).lower()} (unigram and bpe convert)"
    if spec.treat_whitespace_as_suffix:
        return "it marks a word's end, not its start (treat_whitespace_as_suffix)"
    if not proto.normalizer_spec.escape_whitespaces:
        return "it keeps spaces unescaped (escape_whitespaces false)"
    return None
