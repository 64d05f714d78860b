"""The target-language SentencePiece tokenizer: special ids for the trainer, HF files for export."""
from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from xpt_ds.config import ConfigError

MASK_CANDIDATES = ("<mask>", "[MASK]")


@dataclass(frozen=True)
class TargetTokenizer:
    path: str
    vocab_size: int
    pad_id: int
    cls_id: int  # SentencePiece bos: <s> (RoBERTa) or [CLS] (BERT)
    sep_id: int  # SentencePiece eos: </s> (RoBERTa) or [SEP] (BERT)
    unk_id: int
    mask_id: int

    @property
    def special_ids(self) -> list[int]:
        return sorted({self.pad_id, self.cls_id, self.sep_id, self.unk_id, self.mask_id})

    def piece(self, i: int) -> str:
        return _load(self.path).id_to_piece(i)


@functools.lru_cache(maxsize=8)
def _load(path: str) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=path)


def build_tokenizer(path: str, mask_token: str = "") -> TargetTokenizer:
    """Read special-token ids; a missing file or special piece is a one-line error."""
    if not Path(path).is_file():
        raise ConfigError(f"config key 'model.tokenizer': SentencePiece model not found: {path}")
    try:
        sp = _load(path)
    except (RuntimeError, OSError) as e:
        raise ConfigError(f"config key 'model.tokenizer': {path} is not a SentencePiece model ({e})") from None
    ids = {"pad": sp.pad_id(), "bos (cls)": sp.bos_id(), "eos (sep)": sp.eos_id(), "unk": sp.unk_id()}
    missing = [k for k, v in ids.items() if v < 0]
    if missing:
        raise ConfigError(f"tokenizer {path} lacks {', '.join(missing)} id(s); train it with data_tools.prepare "
                          "(pad_id/bos_id/eos_id/unk_id must be >= 0)")
    candidates = (mask_token,) if mask_token else MASK_CANDIDATES
    mask_ids = [sp.piece_to_id(t) for t in candidates if sp.piece_to_id(t) != sp.unk_id()]
    if not mask_ids:
        raise ConfigError(f"tokenizer {path} has no mask piece (looked for {', '.join(candidates)})")
    return TargetTokenizer(path=path, vocab_size=sp.get_piece_size(), pad_id=sp.pad_id(), cls_id=sp.bos_id(),
                           sep_id=sp.eos_id(), unk_id=sp.unk_id(), mask_id=mask_ids[0])


def save_hf_tokenizer(tok: TargetTokenizer, out_dir: Path, model_max_length: int, token_types: int) -> None:
    """Write tokenizer.json etc. that stock ``AutoTokenizer.from_pretrained`` loads, with the same ids as spm.
    Pairs follow the model family: with ``token_types`` > 1 BERT's ``[CLS] A [SEP] B [SEP]`` with B in segment 1;
    otherwise RoBERTa's ``<s> A </s></s> B </s>`` all in segment 0 (its only token type)."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import SpmConverter

    backend = SpmConverter(types.SimpleNamespace(vocab_file=tok.path)).converted()
    cls, sep = tok.piece(tok.cls_id), tok.piece(tok.sep_id)
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1" if token_types > 1 else f"{cls} $A {sep} {sep} $B {sep}",
        special_tokens=[(cls, tok.cls_id), (sep, tok.sep_id)])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=cls, eos_token=sep, cls_token=cls, sep_token=sep,
        pad_token=tok.piece(tok.pad_id), unk_token=tok.piece(tok.unk_id), mask_token=tok.piece(tok.mask_id),
        model_max_length=model_max_length,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"] if token_types > 1
        else ["input_ids", "attention_mask"])
    hf.save_pretrained(str(out_dir))
    (Path(out_dir) / "spm.model").write_bytes(Path(tok.path).read_bytes())
