"""The source model's input-embedding matrix as ``OUT.npy`` + sidecar, the fixed side of an alignment.

    python -m data_tools.source_embeddings --model MODEL_DIR --out emb/minilm_input

Rows are the model's token ids (``get_input_embeddings().weight``, so tied or renamed matrices are found the
way ``transformers`` finds them); the sidecar records the tokenizer files in ``MODEL_DIR`` and the weights'
sha256. A model has no per-token frequencies: ``counts`` is absent and every row counts as seen, so aligners
rank its rows by id (use ``--source-first-row`` there to skip reserved rows, e.g. 1996 for BERT's uncased
vocabulary, whose ids 0-1995 are [PAD], [unused*], special tokens and single characters and whose words after
that come roughly by frequency).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from data_tools.embedding_files import output_prefix, write_embeddings
from data_tools.errors import PrepareError, cli_errors
from data_tools.piece_tokenizers import HfTokenizer, sha256_file

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def input_embeddings(model_dir: Path) -> tuple[np.ndarray, dict]:
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise PrepareError(f"not a Hugging Face model directory (no config.json): {model_dir}")
    import transformers
    transformers.logging.set_verbosity_error()  # "weights not used" for heads we do not need
    model = transformers.AutoModel.from_pretrained(str(model_dir), trust_remote_code=False)
    matrix = model.get_input_embeddings().weight.detach().float().numpy()
    tokenizer = HfTokenizer(model_dir)
    if tokenizer.vocab_size > len(matrix):
        raise PrepareError(f"{model_dir}: the tokenizer has {tokenizer.vocab_size} tokens but the input "
                           f"embedding matrix only {len(matrix)} rows")
    meta = {"kind": "input-embeddings", "tokenizer": tokenizer.identity(), "unseen_ids": [],
            "model": {"path": str(model_dir.resolve()), "model_type": model.config.model_type,
                      "weights": {n: sha256_file(model_dir / n) for n in WEIGHT_FILES if (model_dir / n).is_file()}},
            "created_by": "data_tools.source_embeddings"}
    return matrix, meta


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m data_tools.source_embeddings", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, type=Path, help="Hugging Face model directory")
    p.add_argument("--out", required=True, type=Path, help="output prefix: writes OUT.npy and OUT.json")
    a = p.parse_args(argv)
    with cli_errors():
        matrix, meta = input_embeddings(a.model)
        print(write_embeddings(output_prefix(a.out), matrix, meta).with_suffix(".npy"))


if __name__ == "__main__":
    main()
