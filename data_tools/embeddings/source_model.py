"""A Hugging Face model's input-embedding matrix and its sidecar fields: the fixed side of an alignment
(``xpt-data source-embeddings``).

Rows are the model's token ids (``get_input_embeddings().weight``, so tied or renamed matrices are found the
way ``transformers`` finds them); the sidecar records the tokenizer files in the model directory and the
weights' sha256. A model has no per-token frequencies: ``counts`` is absent and every row counts as seen.

The model is a directory or a hub id (the files transformers loads, and the tokenizer's, fetched into the Hugging
Face cache; offline, they must be there). Loading it whole costs little: transformers 5 reads its files through
memory maps, so a Llama-3.2-3B-shaped bf16 source (two shards, 6.4 GB) took 10-11 s and at most 3.5 GB of resident
memory on a 2-core VM, the 1B shape 11.4-11.5 s and 2.5 GB (2026-11-30). A reader of the one tensor alone was
tried: 9-11 s at 1B with the same memory, 15 s at 3B (hashing the 5 GB shard it came from), so it was not kept.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from safetensors import SafetensorError

from data_tools.errors import PrepareError, first_line
from data_tools.piece_tokenizers import HfTokenizer, sha256_file

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def input_embeddings(model: Path | str) -> tuple[np.ndarray, dict]:
    """(the input-embedding matrix as float32, the sidecar fields) of a model directory or hub id."""
    name = str(model)
    local = _local_dir(name)
    import transformers
    transformers.logging.set_verbosity_error()  # "weights not used" for heads we do not need
    try:  # a hub id: transformers fetches the files it loads, and only those, into the Hugging Face cache
        model = transformers.AutoModel.from_pretrained(str(local or name), trust_remote_code=False)
    except (pickle.UnpicklingError, RuntimeError, EOFError, SafetensorError) as e:  # code in a pickle, a truncated file
        raise PrepareError(f"{local or name}: cannot load its weights ({first_line(e)[:200]})") from None
    except ValueError as e:  # code of its own (auto_map), which is not run; a model type transformers lacks
        raise PrepareError(f"{local or name}: cannot load it ({first_line(e)[:200]})") from None
    except OSError as e:
        if local is not None:
            raise
        from huggingface_hub import constants
        why = "HF_HUB_OFFLINE is set and it is not in the cache" if constants.HF_HUB_OFFLINE else first_line(e)[:200]
        raise PrepareError(f"model '{name}' is neither a local directory nor found in the Hugging Face cache or on "
                           f"the hub ({why})") from None
    matrix = model.get_input_embeddings().weight.detach().float().numpy()
    tokenizer = HfTokenizer(local or name)  # a hub id's tokenizer files join its snapshot
    model_dir = local or tokenizer.path
    if tokenizer.vocab_size > len(matrix):
        raise PrepareError(f"{local or name}: the tokenizer has {tokenizer.vocab_size} tokens but the input "
                           f"embedding matrix only {len(matrix)} rows")
    meta = {"kind": "input-embeddings", "tokenizer": tokenizer.identity(), "unseen_ids": [],
            "model": {"path": str(model_dir.resolve()), "name": name, "model_type": model.config.model_type,
                      "weights": {n: sha256_file(model_dir / n) for n in WEIGHT_FILES if (model_dir / n).is_file()}},
            "created_by": "data_tools.cli.source_embeddings"}
    return matrix, meta


def _local_dir(name: str) -> Path | None:
    """A local model directory (checked), or None for a hub id."""
    path = Path(name)
    if not (path.is_dir() or path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1):
        return None
    if not path.exists():
        raise PrepareError(f"no such model directory: {name}")
    if not (path / "config.json").is_file():
        raise PrepareError(f"not a Hugging Face model directory (no config.json): {name}")
    return path
