"""The two tokenizers of a parallel corpus: the English source model's Hugging Face tokenizer and the target
SentencePiece model (the one that made the target MLM shards). Each side is tokenised without special tokens,
as the monolingual shards are (the reader adds them when it packs), by ``prepare``'s encoders: text that spells a
special token ("[MASK]", "</s>") is plain text on the source side and unk on the target side, never its id."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from data_tools.errors import PrepareError, first_line
from data_tools.piece_tokenizers import HF_TOKENIZER_FILES as TOKENIZER_FILES
from data_tools.piece_tokenizers import check_vocabulary, sha256_file
from data_tools.pipeline.shards import HfEncoder, SpmEncoder

class SourceTokenizer:
    """``AutoTokenizer.from_pretrained(name)`` (a local directory or a hub id)."""

    def __init__(self, name: str):
        from transformers import AutoTokenizer
        self.name = str(name)
        if self.name.startswith(("/", "./", "../", "~")) and not Path(self.name).expanduser().is_dir():
            raise PrepareError(f"{self.name}: no such directory (the source tokenizer)")
        try:
            self.tok = AutoTokenizer.from_pretrained(self.name, trust_remote_code=False)
        except Exception as e:  # transformers raises OSError, ValueError, KeyError... depending on what is wrong
            raise PrepareError(f"cannot load the source tokenizer {self.name}: {first_line(e)}") from None
        check_vocabulary(self.tok, self.name)
        self.vocab_size = len(self.tok)
        self.encoder = HfEncoder(self.tok)

    def files(self) -> dict[str, str]:
        """sha256 of each tokenizer file, from the directory, or for a hub id from the local hub cache."""
        local = Path(self.name)
        found = {}
        for fname in TOKENIZER_FILES:
            if local.is_dir():
                path = local / fname
            else:
                from huggingface_hub import try_to_load_from_cache
                cached = try_to_load_from_cache(self.name, fname)
                path = Path(cached) if isinstance(cached, str) else None
            if path is not None and path.is_file():
                found[fname] = sha256_file(path)
        return found

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        # Long lines are measured and filtered by the caller; the "longer than model_max_length" warning is noise.
        log = logging.getLogger("transformers.tokenization_utils_base")
        level = log.level
        log.setLevel(logging.ERROR)
        try:
            ids = self.encoder.encode(texts)
        finally:
            log.setLevel(level)
        return [np.asarray(x, dtype=np.int64) for x in ids]

    def pieces(self, ids) -> list[str]:
        return self.tok.convert_ids_to_tokens([int(i) for i in ids])

    def describe(self) -> dict:
        return {"name": self.name, "class": type(self.tok).__name__, "vocab_size": self.vocab_size,
                "files": self.files()}


class TargetTokenizer:
    """A SentencePiece model file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise PrepareError(f"{self.path}: no such file (the target SentencePiece model)")
        try:
            self.encoder = SpmEncoder(str(self.path))
        except Exception as e:  # sentencepiece raises RuntimeError/OSError on a file that is not a model
            raise PrepareError(f"cannot load the target SentencePiece model {self.path}: {first_line(e)}") from None
        self.sp = self.encoder.sp
        self.vocab_size = self.sp.get_piece_size()

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        """Ids per text; a special token spelled in it becomes unk (counted in ``self.encoder.specials``)."""
        return [np.asarray(x, dtype=np.int64) for x in self.encoder.encode(texts)]

    def pieces(self, ids) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]

    def describe(self) -> dict:
        return {"file": self.path.name, "vocab_size": self.vocab_size, "sha256": sha256_file(self.path)}
