"""The study's English source as a model directory, from a GGUF file: ``launch/gpu_decoder.sh`` step 1.

    python -m experiments.decoder.source GGUF OUT [--tokenizer DIR]

Writes OUT: the GGUF's model dequantized by transformers (fp32 ``model.safetensors``, ``config.json``) and its
tokenizer, which stock ``from_pretrained(OUT)`` loads. ``--tokenizer DIR`` copies the tokenizer files of DIR (an
earlier OUT) instead of converting the GGUF's: transformers 5.17 (the GPU machines' image) converts SmolLM2's
GGUF tokenizer into another ``tokenizers`` pipeline than 5.24 does (byte fallback, another decoder), the same ids
on text but another serialised backend, and the shards record that backend's digest
(``xpt_ds.data.manifest._check_manifest_tokenizer``), so the session's source takes the tokenizer the payload's shards
were made with. Every run of a session then reads a plain directory
instead of dequantizing the file again (seconds of CPU a run, with several runs starting at once), and the
shards made with the tokenizer here (``xpt-data prepare --hf-tokenizer OUT``) match the one the runs read: the
payload is prepared from a directory written the same way. ``OUT/source.json`` records the GGUF's name and
size; a directory that records the same is kept as it is, so rerunning costs nothing.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import torch

from xpt_ds.embedding_init.files import HF_TOKENIZER_FILES
from xpt_ds.errors import UserError, cli_errors
from xpt_ds.io.file_modes import as_umask

RECORD = "source.json"


TOKENIZER_FILES = (*HF_TOKENIZER_FILES, "chat_template.jinja")  # what --tokenizer DIR copies, where DIR has it


def convert(gguf: Path, out: Path, tokenizer: Path | None = None) -> bool:
    """Write ``out`` from ``gguf`` (and ``tokenizer``'s files, if given) unless it holds this conversion already;
    whether it wrote."""
    if not gguf.is_file():
        raise UserError(f"{gguf}: no such GGUF file")
    record = {"gguf": gguf.name, "bytes": gguf.stat().st_size}
    if tokenizer is not None:
        if not (tokenizer / "tokenizer.json").is_file():
            raise UserError(f"--tokenizer {tokenizer}: no tokenizer.json there")
        record["tokenizer_json_sha256"] = hashlib.sha256((tokenizer / "tokenizer.json").read_bytes()).hexdigest()
    done = out / RECORD
    if done.is_file() and json.loads(done.read_text()) == record:
        return False
    from transformers import AutoModelForCausalLM

    from xpt_ds.io.gguf_tokenizer import load_gguf_tokenizer
    where = {"pretrained_model_name_or_path": str(gguf.parent), "gguf_file": gguf.name}
    loaded = AutoModelForCausalLM.from_pretrained(**where)  # dequantized, but marked as GGUF: not saveable
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):  # no random init of weights that are replaced at once (2.4 s of 135M on a CPU)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    model.tie_weights()  # the assigned embedding is the head again (only saved: the rotary buffers stay on meta)
    staging = out.with_name(out.name + ".writing")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    as_umask(staging)  # safetensors writes 0600 files
    if tokenizer is None:
        load_gguf_tokenizer(gguf).save_pretrained(staging)  # its special tokens as the file states them
    else:
        for name in TOKENIZER_FILES:
            if (tokenizer / name).is_file():
                shutil.copy(tokenizer / name, staging / name)
    (staging / RECORD).write_text(json.dumps(record) + "\n")  # last: a directory without it is not finished
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return True


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.decoder.source", description=__doc__.split("\n\n")[0])
    p.add_argument("gguf", type=Path, help="the source's .gguf file")
    p.add_argument("out", type=Path, help="the model directory to write")
    p.add_argument("--tokenizer", type=Path, default=None,
                   help="copy this directory's tokenizer files instead of converting the GGUF's")
    a = p.parse_args(argv)
    wrote = convert(a.gguf, a.out, a.tokenizer)
    print(f"{a.out}: {'written from' if wrote else 'already holds'} {a.gguf.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
