"""A Hugging Face model's input-embedding matrix and its sidecar fields: the fixed side of an alignment
(``xpt-data source-embeddings``).

Rows are the model's token ids (``get_input_embeddings().weight``, so tied or renamed matrices are found the
way ``transformers`` finds them); the sidecar records the tokenizer files in the model directory and the
weights' sha256. A model has no per-token frequencies: ``counts`` is absent and every row counts as seen. The model
is a directory or a hub id (its snapshot in the Hugging Face cache, fetched if it is not there). Loading the model
whole costs little: transformers 5 reads its files through memory maps, so a Llama-3.2-3B-shaped bf16 source (two
shards, 6.4 GB) took 10-11 s and at most 3.5 GB of resident memory on a 2-core VM, the 1B shape 11.4-11.5 s and
2.5 GB (2026-11-30). A reader of the one tensor alone was tried: 9-11 s at 1B with the same memory, 15 s at 3B
(hashing the 5 GB shard it came from), so it was not kept.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from safetensors import SafetensorError

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import HF_TOKENIZER_FILES, HfTokenizer, sha256_file

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# what a hub id's snapshot needs: the config, every weight file (single or sharded) and the tokenizer
SNAPSHOT_FILES = ("config.json", "*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin",
                  "pytorch_model.bin.index.json", *HF_TOKENIZER_FILES)


def input_embeddings(model: Path | str) -> tuple[np.ndarray, dict]:
    """(the input-embedding matrix as float32, the sidecar fields) of a model directory or hub id."""
    name = str(model)
    model_dir = _model_dir(name)
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
            "model": {"path": str(model_dir.resolve()), "name": name, "model_type": model.config.model_type,
                      "weights": {n: sha256_file(model_dir / n) for n in WEIGHT_FILES if (model_dir / n).is_file()}},
            "created_by": "data_tools.cli.source_embeddings"}
    return matrix, meta


def _model_dir(name: str) -> Path:
    """A local model directory, or a hub id's snapshot (config, weights, tokenizer) in the Hugging Face cache,
    fetched if it is not there (offline: it must be)."""
    path = Path(name)
    if path.is_dir() or path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        if not (path / "config.json").is_file():
            raise PrepareError(f"not a Hugging Face model directory (no config.json): {name}")
        return path
    from huggingface_hub import constants, snapshot_download
    try:
        snapshot = Path(snapshot_download(name, allow_patterns=list(SNAPSHOT_FILES)))
    except Exception as e:  # the hub client raises many types (offline, 404, auth); all mean "not available"
        why = "HF_HUB_OFFLINE is set and it is not in the cache" if constants.HF_HUB_OFFLINE else type(e).__name__
        raise PrepareError(f"model '{name}' is neither a local directory nor found in the Hugging Face cache or on "
                           f"the hub ({why})") from None
    if not (snapshot / "config.json").is_file():
        raise PrepareError(f"model '{name}' has no config.json (not a Hugging Face model)")
    return snapshot
