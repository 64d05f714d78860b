"""A Hugging Face model's input-embedding matrix and its sidecar fields: the fixed side of an alignment
(``xpt-data source-embeddings``).

Rows are the model's token ids (``get_input_embeddings().weight``, so tied or renamed matrices are found the
way ``transformers`` finds them); the sidecar records the tokenizer files in the model directory and the
weights' sha256. A model has no per-token frequencies: ``counts`` is absent and every row counts as seen.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from safetensors import SafetensorError

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import HfTokenizer, sha256_file

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def input_embeddings(model_dir: Path) -> tuple[np.ndarray, dict]:
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise PrepareError(f"not a Hugging Face model directory (no config.json): {model_dir}")
    import transformers
    transformers.logging.set_verbosity_error()  # "weights not used" for heads we do not need
    try:
        model = transformers.AutoModel.from_pretrained(str(model_dir), trust_remote_code=False)
    except (pickle.UnpicklingError, RuntimeError, EOFError, SafetensorError) as e:  # code in a pickle, a truncated file
        why = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise PrepareError(f"{model_dir}: cannot load its weights ({why[:200]})") from None
    matrix = model.get_input_embeddings().weight.detach().float().numpy()
    tokenizer = HfTokenizer(model_dir)
    if tokenizer.vocab_size > len(matrix):
        raise PrepareError(f"{model_dir}: the tokenizer has {tokenizer.vocab_size} tokens but the input "
                           f"embedding matrix only {len(matrix)} rows")
    meta = {"kind": "input-embeddings", "tokenizer": tokenizer.identity(), "unseen_ids": [],
            "model": {"path": str(model_dir.resolve()), "model_type": model.config.model_type,
                      "weights": {n: sha256_file(model_dir / n) for n in WEIGHT_FILES if (model_dir / n).is_file()}},
            "created_by": "data_tools.cli.source_embeddings"}
    return matrix, meta
