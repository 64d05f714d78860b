"""``python -m xpt_ds.export --run RUN_DIR [--tag TAG] --out DIR``: a checkpoint -> a stock HF model directory.

Works offline on one process from any ZeRO stage and any world size: trainable weights come from the
fp32 optimizer partitions (DeepSpeed's zero_to_fp32), frozen ones from ``frozen_fp32.pt``. The result is
a plain ``save_pretrained`` directory (``AutoModelForMaskedLM`` / ``AutoTokenizer`` load it), with the
run's SentencePiece model converted to ``tokenizer.json`` (or, for ``keep_vocab``, the source's own tokenizer). Models of
``method: adapters`` also carry ``xpt_adapters.py``, mapped for the masked LM, the bare encoder and the
classification, token-classification, question-answering and multiple-choice heads; they load with
``trust_remote_code=True``.
"""
from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig

from xpt_ds import adapters, checkpoint
from xpt_ds.config import ConfigError
from xpt_ds.engine import zero_stage
from xpt_ds.files import os_error_line, unwritable
from xpt_ds.methods import method_of
from xpt_ds.model import build_skeleton, load_fp32_state
from xpt_ds.objective import strip_prefix
from xpt_ds.tokenizer import copy_hf_tokenizer, save_hf_tokenizer, saved_tokenizer


def load_checkpoint_fp32(ckpt_root: Path, tag: str) -> dict[str, torch.Tensor]:
    """Full fp32 state dict (HF names) of a checkpoint."""
    model_states = checkpoint.read_client_state(ckpt_root, tag)
    if zero_stage(model_states["ds_config"]) == 0:  # fp32 only (engine.load_ds_config rejects bf16 at stage 0): the module is the master
        state = {k: v.float() for k, v in model_states["module"].items()}
    else:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
        with contextlib.redirect_stdout(sys.stderr):  # its progress lines: keep stdout for results (JSON)
            state = get_fp32_state_dict_from_zero_checkpoint(str(ckpt_root), tag=tag, exclude_frozen_parameters=True)
    state.update(torch.load(ckpt_root / tag / "frozen_fp32.pt", map_location="cpu", weights_only=True))
    return strip_prefix(state)


def load_model(run_dir: Path, tag: str | None = None):
    """(the checkpoint's HF model in fp32, its tag directory); ``tag`` None = the newest complete one."""
    ckpt_root = run_dir / "checkpoints"
    tag = checkpoint.resolve_tag(ckpt_root, tag or "auto")
    if tag is None:
        raise FileNotFoundError(f"no complete checkpoint in {ckpt_root}")
    tag_dir = ckpt_root / tag
    model = build_skeleton(AutoConfig.from_pretrained(tag_dir / "hf_config"))
    load_fp32_state(model, load_checkpoint_fp32(ckpt_root, tag), f"checkpoint {tag_dir}")
    return model, tag_dir


def export(run_dir: Path, out: Path, tag: str | None = None) -> Path:
    why = unwritable(out)  # before the checkpoint is read (minutes for a large model)
    if why is not None:
        raise OSError(f"--out {out}: cannot write there ({why})")
    model, tag_dir = load_model(run_dir, tag)
    hf_config = model.config
    method = method_of(hf_config)
    if method is not None and method.export == "adapters":
        shutil.copy(Path(__file__).with_name("adapters.py"), out / "xpt_adapters.py")
        model.config.auto_map = adapters.auto_map(hf_config.model_type)
    model.save_pretrained(out)
    tok = saved_tokenizer(tag_dir)
    if tok.kind == "huggingface":  # keep_vocab: the source's own tokenizer, as the checkpoint saved it
        copy_hf_tokenizer(tok.path, out)
    else:
        save_hf_tokenizer(tok, out, model_max_length=hf_config.xpt_max_length, token_types=hf_config.type_vocab_size)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xpt_ds.export", description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, type=Path, help="run directory (the run config's run_dir)")
    p.add_argument("--tag", help="checkpoint tag (default: newest complete)")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    a = p.parse_args(argv)
    try:
        print(export(a.run, a.out, a.tag))
    except (ConfigError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
