"""A checkpoint -> a stock HF model directory (``python -m xpt_ds.export``), and the checkpoint's model in fp32
for evaluation and the probe (``load_model``).

Works offline on one process from any ZeRO stage and any world size: trainable weights come from the
fp32 optimizer partitions (DeepSpeed's zero_to_fp32), frozen ones from ``frozen_fp32.pt``. The result is
a plain ``save_pretrained`` directory (``AutoModelForMaskedLM``, or ``AutoModelForCausalLM`` for a decoder
source, and ``AutoTokenizer`` load it), with the
run's SentencePiece model converted to ``tokenizer.json`` (or, for ``keep_vocab``, the source's own tokenizer). Models of
``method: adapters`` also carry ``xpt_adapters.py``, mapped for the masked LM, the bare encoder and the
classification, token-classification, question-answering and multiple-choice heads; they load with
``trust_remote_code=True``. Models of ``method: trelm`` carry ``xpt_trelm.py`` the same way: the TRILayer runs in
the base model, the target language row is folded into the token-type rows, and the English vocabulary is
dropped (``xpt_ds.trelm.hf`` says what is kept and why).
"""
from __future__ import annotations

import contextlib
import copy
import fnmatch
import json
import os
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig

from xpt_ds.config import MASKING_KEYS
from xpt_ds.config.methods import method_of
from xpt_ds.errors import first_line
from xpt_ds.data.tokenizer import copy_hf_tokenizer, save_hf_tokenizer, saved_tokenizer
from xpt_ds.io.paths import unwritable
from xpt_ds.io.trust import OWN_CODE, load_plain
from xpt_ds.model import adapters, lora
from xpt_ds.model.build import build_skeleton, load_fp32_state
from xpt_ds.model.decoder import is_decoder
from xpt_ds.model.objective import strip_prefix
from xpt_ds.training import checkpoint, tag_checks
from xpt_ds.training.engine import zero_stage
from xpt_ds.trelm import hf as trelm_hf


def load_checkpoint_fp32(ckpt_root: Path, tag: str, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """Full fp32 state dict (HF names) of a checkpoint. Its files must be plain data (``xpt_ds.io.trust``) unless
    ``allow_pickle``: DeepSpeed's zero_to_fp32 unpickles them whole."""
    return strip_prefix(checkpoint_fp32(ckpt_root, tag, allow_pickle))


def checkpoint_fp32(ckpt_root: Path, tag: str, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """``load_checkpoint_fp32`` with the training module's names (``hf.`` first), as ``full_fp32_state`` gives."""
    tag_checks.check_files(ckpt_root / tag, allow_pickle, distributed=False)
    model_states = checkpoint.read_client_state(ckpt_root, tag, allow_pickle)
    if zero_stage(model_states["ds_config"]) == 0:  # fp32 only (engine.load_ds_config rejects bf16 at stage 0): the module is the master
        state = {k: v.float() for k, v in model_states["module"].items()}
    else:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
        with contextlib.redirect_stdout(sys.stderr):  # its progress lines: keep stdout for results (JSON)
            state = get_fp32_state_dict_from_zero_checkpoint(str(ckpt_root), tag=tag, exclude_frozen_parameters=True)
    state.update(load_plain(ckpt_root / tag / "frozen_fp32.pt", allow_pickle=allow_pickle))
    return state


def load_model(run_dir: Path, tag: str | None = None, allow_pickle: bool = False):
    """(the checkpoint's HF model in fp32, its tag directory); ``tag`` None = the newest complete one."""
    ckpt_root = run_dir / "checkpoints"
    tag = checkpoint.resolve_tag(ckpt_root, tag or "auto")
    if tag is None:
        raise FileNotFoundError(f"no complete checkpoint in {ckpt_root}")
    tag_dir = ckpt_root / tag
    config = tag_dir / "hf_config" / "config.json"  # the target model's config, which a save writes for this
    if not config.is_file():
        raise checkpoint.CheckpointError(f"checkpoint {tag_dir} has no hf_config/config.json, the target model's "
                                         "config the export and evaluate build from (copy it from another "
                                         "checkpoint of the run: every one holds the same)")
    try:
        hf_config = AutoConfig.from_pretrained(config.parent, trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise checkpoint.CheckpointError(f"checkpoint {tag_dir}: cannot read {config} ({first_line(e)})") from None
    model = build_skeleton(hf_config, blank=True)
    load_fp32_state(model, load_checkpoint_fp32(ckpt_root, tag, allow_pickle), f"checkpoint {tag_dir}")
    return model, tag_dir


@torch.no_grad()
def trelm_export_model(model: torch.nn.Module) -> torch.nn.Module:
    """A trained trelm model (stock *ForMaskedLM + ``trelm``) -> the ``xpt_ds.trelm.hf`` class that ships with
    the export, for target-language input: the target row of ``trelm.language_embeddings`` folded into every
    token-type row and kept as the TRILayer's ``output_language``; the English vocabulary, the English row and
    the placeholder left out. Loaded strictly, so a parameter the conversion misses is an error."""
    from xpt_ds.trelm.model import TARGET
    cfg = copy.deepcopy(model.config)
    del cfg.xpt_trelm_source_vocab_size, cfg.xpt_trelm_source_pad_id  # build_skeleton: no training parts
    prefix, parts = model.base_model_prefix, model.trelm
    lang = parts.language_embeddings.weight[TARGET]
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("trelm.")}
    token_types = f"{prefix}.embeddings.token_type_embeddings.weight"
    state[token_types] = state[token_types] + lang
    if parts.trilayer is None:  # trelm_no_tri: with the row folded, a stock model computes the same
        exported = build_skeleton(cfg, blank=True).eval()
        exported.load_state_dict(state, strict=True)
        return exported
    cfg.auto_map = trelm_hf.auto_map(cfg.model_type)
    state[f"{prefix}.trelm.output_language"] = lang.clone()
    state.update({f"{prefix}.trelm.trilayer.{k}": v for k, v in parts.trilayer.state_dict().items()})
    stock = type(model).__name__
    exported = getattr(trelm_hf, f"XptTreLM{stock}")(cfg).float().eval()
    exported.load_state_dict(state, strict=True)
    exported.config.architectures = [f"XptTreLM{stock}"]
    return exported


def save_model(model: torch.nn.Module, out: Path) -> None:
    """``save_pretrained``, plus the remote code (and for trelm the conversion) of a method that needs it."""
    method = method_of(model.config)
    if getattr(model.config, lora.CONFIG_KEY, None):
        model = lora.merged(model)
        print("lora: the low-rank updates are merged into the base weights; the export is a stock model",
              file=sys.stderr)
    if method is not None and method.export == "adapters":
        shutil.copy(OWN_CODE["xpt_adapters.py"], out / "xpt_adapters.py")
        model.config.auto_map = adapters.auto_map(model.config.model_type)
    if method is not None and method.export == "trelm":
        model = trelm_export_model(model)
        if method.trilayer:
            shutil.copy(OWN_CODE["xpt_trelm.py"], out / "xpt_trelm.py")
            print("trelm: the TRILayer ships as xpt_trelm.py (load with trust_remote_code=True); the target language "
                  "row is folded into the token-type rows; the English vocabulary (source_word_embeddings, "
                  "source_lm_bias), the English language row and the placeholder are not exported (English input "
                  "and CdLM: use the checkpoint)", file=sys.stderr)
        else:
            print(f"{method.name}: exported as a stock model, the target language row folded into the token-type "
                  "rows; the English vocabulary and language row are not exported (English input: use the "
                  "checkpoint)", file=sys.stderr)
    model.save_pretrained(out)


def export(run_dir: Path, out: Path, tag: str | None = None, allow_pickle: bool = False) -> Path:
    """Write the export into a new folder beside ``out``, then put it in place of ``out``: an export stopped
    half-way leaves ``out`` as it was, and the files of an earlier export there are replaced whole (none of them,
    such as a ``spm.model`` a keep_vocab export does not write, stays beside the new one). Files the earlier
    export did not write (its ``xpt_export.json`` lists those it did; a model card a user added) are kept. A
    non-empty ``out`` that is not an xpt-ds export is refused before the checkpoint is read."""
    check_export_out(out)
    why = unwritable(out.parent)  # before the checkpoint is read (minutes for a large model)
    if why is not None:
        raise OSError(f"--out {out}: cannot write there ({why})")
    model, tag_dir = load_model(run_dir, tag, allow_pickle)
    hf_config = model.config
    data = checkpoint.read_config(tag_dir.parent, tag_dir.name, allow_pickle).data
    hf_config.xpt_data = {k: getattr(data, k) for k in MASKING_KEYS}  # evaluate --model masks as the run did
    staging = out.parent / f".{out.name}.writing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        save_model(model, staging)
        tok = saved_tokenizer(tag_dir)
        if tok.kind == "huggingface":  # keep_vocab: the source's own tokenizer, as the checkpoint saved it
            copy_hf_tokenizer(tok.path, staging)
        else:
            save_hf_tokenizer(tok, staging, model_max_length=hf_config.xpt_max_length, causal=is_decoder(hf_config),
                              token_types=getattr(hf_config, "type_vocab_size", 1))
            overridden = auto_tokenizer_override(staging, tok)
            if overridden:
                print(f"warning: stock AutoTokenizer loads this export's tokenizer as {overridden}, which rebuilds it "
                      f"and gives other ids than its spm.model (transformers overrides the class it reads for "
                      f"model_type {hf_config.model_type}); load it with "
                      f"PreTrainedTokenizerFast.from_pretrained('{out}')", file=sys.stderr)
        _record_files(staging)
        for name, replaced in _carry_own_files(out, staging):
            print(f"{'warning: replaced' if replaced else 'kept'} {out / name}: not a file of the earlier export"
                  f"{', but this export writes one of that name' if replaced else ''}", file=sys.stderr)
        _put_in_place(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def auto_tokenizer_override(model_dir: Path, tok) -> str | None:
    """The class name stock ``AutoTokenizer`` gives ``model_dir``'s tokenizer when it encodes text otherwise than
    the fast tokenizer written there (transformers 5 replaces the class a tokenizer_config.json names for some
    model types, Qwen2's among them, by their own, which rebuilds a byte-level BPE from the vocabulary); None when
    they agree, or when AutoTokenizer cannot load the directory without its code (an adapters export)."""
    import sentencepiece as spm
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    sp = spm.SentencePieceProcessor(model_file=str(tok.path))
    text = sp.decode([i for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)][:200])
    try:
        auto = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False)
    except Exception:  # noqa: BLE001 - a directory that needs its code to load: nothing to compare here
        return None
    written = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    same = auto.backend_tokenizer.encode(text).ids == written.backend_tokenizer.encode(text).ids
    return None if same else type(auto).__name__


def check_export_out(out: Path) -> None:
    """``out`` may be missing, empty, or an earlier export (its config.json names an ``xpt_method``, read as
    JSON); anything else would be mixed with the export's files or replaced, so it is refused."""
    if not out.exists():
        return
    if not out.is_dir():
        raise OSError(f"--out {out}: is not a directory")
    if not any(out.iterdir()):
        return
    try:
        earlier = "xpt_method" in json.loads((out / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        earlier = False
    if not earlier:
        raise OSError(f"--out {out}: is not empty and holds no earlier xpt-ds export (no config.json with "
                      "xpt_method); give a new or empty directory")


EXPORT_RECORD = "xpt_export.json"  # the files an export wrote: a later export into its folder replaces only those
# What an export without that record (written before 2026-11-28) may hold of its own: save_pretrained's model and
# config files, every tokenizer file (a keep_vocab export copies the source's), the code an export ships.
EXPORT_FILES = ("config.json", "generation_config.json", "model*.safetensors", "model.safetensors.index.json",
                "pytorch_model*.bin", "tokenizer*.json", "special_tokens_map.json", "added_tokens.json", "spm.model",
                "*.bpe.model", "sentencepiece*.model", "vocab.*", "merges.txt", "chat_template.*", "xpt_*.py")


def _record_files(staging: Path) -> None:
    files = {str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()} | {EXPORT_RECORD}
    (staging / EXPORT_RECORD).write_text(json.dumps({"files": sorted(files)}, indent=1) + "\n")


def _carry_own_files(out: Path, staging: Path) -> list[tuple[str, bool]]:
    """Copy into ``staging`` the files of ``out`` that the earlier export there did not write (not in its
    record; for an export from before the record, none an export writes: ``EXPORT_FILES``); (name, whether the
    new export writes a file of that name, which then wins)."""
    try:
        written = set(json.loads((out / EXPORT_RECORD).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):  # an export from before the record: what one writes
        written = None
    carried = []
    for path in sorted(out.rglob("*")):
        name = str(path.relative_to(out))
        if not path.is_file() or (name in written if written is not None else
                                  any(fnmatch.fnmatch(name, p) for p in EXPORT_FILES)):
            continue
        target = staging / name
        carried.append((name, target.exists()))
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)  # a copy: ``out`` stays whole until the swap
    return carried


def _put_in_place(staging: Path, out: Path) -> None:
    """``staging`` becomes ``out``; the earlier ``out`` is moved aside first and removed after."""
    aside = out.parent / f".{out.name}.replaced-{os.getpid()}"
    if out.exists():
        out.rename(aside)
    try:
        staging.rename(out)
    except OSError:
        if aside.exists():
            aside.rename(out)
        raise
    shutil.rmtree(aside, ignore_errors=True)
