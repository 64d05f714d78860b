"""The study's English source as a model directory, from a GGUF file: ``launch/gpu_decoder.sh`` step 1.

    python -m experiments.decoder.source GGUF OUT

Writes OUT: the GGUF's model dequantized by transformers (fp32 ``model.safetensors``, ``config.json``) and its
tokenizer, which stock ``from_pretrained(OUT)`` loads. Every run of a session then reads a plain directory
instead of dequantizing the file again (seconds of CPU a run, with several runs starting at once), and the
shards made with the tokenizer here (``xpt-data prepare --hf-tokenizer OUT``) match the one the runs read: the
payload is prepared from a directory written the same way. ``OUT/source.json`` records the GGUF's name and
size; a directory that records the same is kept as it is, so rerunning costs nothing.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch

from xpt_ds.errors import UserError, cli_errors

RECORD = "source.json"


def convert(gguf: Path, out: Path) -> bool:
    """Write ``out`` from ``gguf`` unless it holds this file's conversion already; whether it wrote."""
    if not gguf.is_file():
        raise UserError(f"{gguf}: no such GGUF file")
    record = {"gguf": gguf.name, "bytes": gguf.stat().st_size}
    done = out / RECORD
    if done.is_file() and json.loads(done.read_text()) == record:
        return False
    from transformers import AutoModelForCausalLM, AutoTokenizer
    where = {"pretrained_model_name_or_path": str(gguf.parent), "gguf_file": gguf.name}
    loaded = AutoModelForCausalLM.from_pretrained(**where)  # dequantized, but marked as GGUF: not saveable
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    tokenizer = AutoTokenizer.from_pretrained(**where)
    staging = out.with_name(out.name + ".writing")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / RECORD).write_text(json.dumps(record) + "\n")  # last: a directory without it is not finished
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return True


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.decoder.source", description=__doc__.split("\n\n")[0])
    p.add_argument("gguf", type=Path, help="the source's .gguf file")
    p.add_argument("out", type=Path, help="the model directory to write")
    a = p.parse_args(argv)
    wrote = convert(a.gguf, a.out)
    print(f"{a.out}: {'written from' if wrote else 'already holds'} {a.gguf.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
