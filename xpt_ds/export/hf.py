"""A checkpoint -> a stock HF model directory (``python -m xpt_ds.cli.export``), and the checkpoint's model in fp32
for evaluation and the probe (``load_model``).

Works offline on one process from any ZeRO stage and any world size, one tensor at a time: every value is read
from the checkpoint when it is written (``xpt_ds.checkpoint.values``: the trainable ones from the fp32
optimizer partitions, the frozen ones from the frozen-weights file, all memory-mapped) and streamed into
safetensors files of at most 5 GB (``model.safetensors``, or ``model-0000k-of-0000n.safetensors`` with
``model.safetensors.index.json``), the names, config.json and generation_config.json being what the stock
class's ``save_pretrained`` writes (tied weights once), so ``AutoModelForMaskedLM``, or ``AutoModelForCausalLM``
for a decoder source, and ``AutoTokenizer`` load it. The run's SentencePiece model is converted to
``tokenizer.json`` (or, for ``keep_vocab``, the source's own tokenizer is copied). Models of ``method: adapters``
also carry ``xpt_adapters.py``, mapped for the masked LM, the bare encoder and the classification,
token-classification, question-answering and multiple-choice heads; they load with ``trust_remote_code=True``.
Models of ``method: trelm`` carry ``xpt_trelm.py`` the same way: the TRILayer runs in the base model, the target
language row is folded into the token-type rows, and the English vocabulary is dropped (``xpt_ds.trelm.hf`` says
what is kept and why). ``method: lora`` exports merge each low-rank update into its base weight (peft's own merge
arithmetic, one layer at a time): a stock model; so are ``method: extend`` exports, their old and new rows joined
(``xpt_ds.model.methods.extend``). A Qwen2 target of full attention with a vocabulary of its own is written as the
``LlamaForCausalLM`` of the same function, whose tokenizer stock ``AutoTokenizer`` reads as written
(``xpt_ds.export.llama_layout``). Every export carries a model card, ``README.md``
(``xpt_ds.export.model_card``).

The weights are the checkpoint's fp32 values, bit for bit, unless ``--dtype bfloat16`` rounds each (to nearest,
ties to even, as ``Tensor.to`` does) and the config says ``bfloat16``: the hub's form of a 1-8B decoder, half the
bytes, loaded in bf16 by ``from_pretrained(..., dtype="auto")``.
"""
from __future__ import annotations

import copy
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig

from xpt_ds.checkpoint import migrate, store, tag_checks, tags
from xpt_ds.checkpoint.values import CheckpointValues
from xpt_ds.config import MASKING_KEYS, read_checkpoint_config
from xpt_ds.config.methods import method_of
from xpt_ds.data.tokenizer import (copy_hf_tokenizer, export_causal_hf_tokenizer, loadable_by_transformers_4,
                                  rebuilt_by_auto, save_hf_tokenizer, saved_tokenizer)
from xpt_ds.errors import first_line
from xpt_ds.export import llama_layout, out_dir
from xpt_ds.export.model_card import CARD, build_card, write_card
from xpt_ds.io.paths import write_error, unwritable
from xpt_ds.io.safetensors_files import DEFAULT_MAX_SHARD_BYTES, ShardedWriter
from xpt_ds.io.trust import OWN_CODE
from xpt_ds.model.methods import adapters, extend, lora
from xpt_ds.model.decoder import is_decoder
from xpt_ds.model.skeleton import assign, no_init_weights, parameters_on_meta, skeleton
from xpt_ds.trelm import hf as trelm_hf

Values = Callable[[str], torch.Tensor]  # HF parameter name of the trained model -> its fp32 value
EXPORT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # --dtype: what the weight files hold


def load_checkpoint_fp32(ckpt_root: Path, tag: str, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """Every parameter of a checkpoint in fp32, by HF name (a whole model in memory: tests and small models)."""
    tag_checks.check_files(ckpt_root / tag, allow_pickle, distributed=False)
    values = CheckpointValues(ckpt_root, tag, allow_pickle)
    return {n.removeprefix("hf."): values(n) for n in values.names()}


def checkpoint_config(run_dir: Path, tag: str | None = None):
    """(the checkpoint's tag directory, its target model's HF config); ``tag`` None = the newest complete one."""
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no such run directory: {run_dir}")
    ckpt_root = run_dir / "checkpoints"
    tag = tags.resolve_tag(ckpt_root, tag or "auto")
    if tag is None:
        raise FileNotFoundError(f"no complete checkpoint in {ckpt_root}")
    tag_dir = ckpt_root / tag
    config = tag_dir / "hf_config" / "config.json"  # the target model's config, which a save writes for this
    if not config.is_file():
        raise tags.CheckpointError(f"checkpoint {tag_dir} has no hf_config/config.json, the target model's "
                                   "config the export and evaluate build from (copy it from another "
                                   "checkpoint of the run: every one holds the same)")
    try:
        return tag_dir, AutoConfig.from_pretrained(config.parent, trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise tags.CheckpointError(f"checkpoint {tag_dir}: cannot read {config} ({first_line(e)})") from None


def load_model(run_dir: Path, tag: str | None = None, allow_pickle: bool = False):
    """(the checkpoint's HF model in fp32, its tag directory); ``tag`` None = the newest complete one. Each
    parameter is the value read from the checkpoint (no second copy of the model)."""
    tag_dir, hf_config = checkpoint_config(run_dir, tag)
    model = skeleton(hf_config)
    return assign(model, checkpoint_values(tag_dir, model, allow_pickle)), tag_dir


def checkpoint_values(tag_dir: Path, model: nn.Module, allow_pickle: bool = False) -> Values:
    """The checkpoint's values by HF name, one at a time, checked to be ``model``'s (``described``): the model
    its hf_config/config.json describes. Its files must be plain data (``xpt_ds.io.trust``) unless
    ``allow_pickle``."""
    tag_checks.check_files(tag_dir, allow_pickle, distributed=False)
    return described(CheckpointValues(tag_dir.parent, tag_dir.name, allow_pickle), model, tag_dir)


def described(values: CheckpointValues, model: nn.Module, tag_dir: Path) -> Values:
    """``values`` by HF name, checked to be those of ``model``, the model the tag's hf_config/config.json
    describes: a value for each of its parameters and none besides (else one CheckpointError line, before
    anything is read), and each value of its parameter's shape when it is read (a layer's width)."""
    held = {n.removeprefix("hf.") for n in values.names() if n.startswith("hf.")}
    tied = {n.removeprefix("hf.") for n in values.shared}  # held under the name of the weight they are tied to
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters(remove_duplicate=False)}  # tied: both names
    lacking, extra = sorted(shapes.keys() - held - tied), sorted(held - shapes.keys())

    def mismatch(why: str) -> tags.CheckpointError:
        return tags.CheckpointError(f"checkpoint {tag_dir}: its hf_config/config.json does not describe this "
                                    f"checkpoint's weights: {why}")

    if lacking or extra:
        raise mismatch(", and ".join(
            ([f"the checkpoint lacks {len(lacking)} parameter(s) of the config's model (first: {lacking[0]})"]
             if lacking else []) +
            ([f"the checkpoint holds {len(extra)} parameter(s) the config's model lacks (first: {extra[0]})"]
             if extra else [])))

    def value(name: str) -> torch.Tensor:
        got = values(f"hf.{name}")
        if name in shapes and tuple(got.shape) != shapes[name]:
            raise mismatch(f"{name} is {tuple(got.shape)} in the checkpoint, {shapes[name]} in the config's model")
        return got

    return value


class Exported:
    """What an export of a trained model of ``hf_config`` holds: ``model``, the exported class on the meta device
    (its config is the export's), and ``value(name)`` of each of its parameters from the trained model's
    ``values``: as they are, LoRA merged (``lora_merged``), TreLM converted (``trelm_value``); the files store
    them in ``dtype`` (``EXPORT_DTYPES``), rounded once from the fp32 value. ``values`` None: set after, from
    ``trained`` (``checkpoint_values``), the model the checkpoint's values are checked against."""

    def __init__(self, hf_config, values: Values | None, dtype: str = "float32", llama_form: bool = False):
        if dtype not in EXPORT_DTYPES:
            raise ValueError(f"--dtype {dtype}: the export writes {' or '.join(EXPORT_DTYPES)}")
        self.values = values
        self.dtype = dtype
        self.method = method_of(hf_config)
        self.trained = skeleton(hf_config)  # the trained model's module tree (LoRA layers, TreLM parts)
        cfg = copy.deepcopy(hf_config)
        self.notes: list[str] = []
        self.code: str | None = None
        if getattr(cfg, lora.CONFIG_KEY, None):
            delattr(cfg, lora.CONFIG_KEY)
            self.notes.append("lora: the low-rank updates are merged into the base weights; the export is a stock "
                              "model")
        self.joined = extend.stock_names(self.trained) if extend.extended_rows(hf_config) else {}
        if self.joined:  # method extend: the old and new rows concatenated into the stock matrices
            delattr(cfg, extend.CONFIG_KEY)
            self.notes.append("extend: the source's rows and the new rows are joined into the stock embedding (and "
                              "head) matrices; the export is a stock model")
        if self.method is not None and self.method.export == "adapters":
            cfg.auto_map = adapters.auto_map(cfg.model_type)
            self.code = "xpt_adapters.py"
        self.trilayer = self.method is not None and self.method.export == "trelm" and self.method.trilayer
        if self.method is not None and self.method.export == "trelm":
            del cfg.xpt_trelm_source_vocab_size, cfg.xpt_trelm_source_pad_id  # skeleton: no training parts
            self.prefix = self.trained.base_model_prefix
            if self.trilayer:
                cfg.auto_map = trelm_hf.auto_map(cfg.model_type)
                self.code = "xpt_trelm.py"
                self.notes.append("trelm: the TRILayer ships as xpt_trelm.py (load with trust_remote_code=True); the "
                                  "target language row is folded into the token-type rows; the English vocabulary "
                                  "(source_word_embeddings, source_lm_bias), the English language row and the "
                                  "placeholder are not exported (English input and CdLM: use the checkpoint)")
            else:
                self.notes.append(f"{self.method.name}: exported as a stock model, the target language row folded "
                                  "into the token-type rows; the English vocabulary and language row are not "
                                  "exported (English input: use the checkpoint)")
        llama = llama_layout.as_llama(cfg) if llama_form and self.code is None else None  # no code of ours
        if llama is not None:  # a Qwen2 target of its own vocabulary: the Llama model of the same function
            cfg = llama
            self.notes.append("qwen2: exported as LlamaForCausalLM (attention_bias, o_proj's bias zero), the same "
                              "function: stock AutoTokenizer would read a qwen2 directory's tokenizer as "
                              "Qwen2Tokenizer, with other ids than the run's")
        if self.trilayer:
            stock = type(self.trained).__name__
            with no_init_weights(), parameters_on_meta():
                self.model = getattr(trelm_hf, f"XptTreLM{stock}")(cfg)
            self.model.tie_weights()  # init_weights ties the head, and no_init_weights skipped it
            self.model.config.architectures = [f"XptTreLM{stock}"]
        else:
            self.model = skeleton(cfg)
            self.model.config.architectures = [type(self.model).__name__]
        self.model.config.dtype = dtype
        self.params = {n for n, _ in self.model.named_parameters(remove_duplicate=False)}
        # what the Llama form adds: o_proj's biases (a LoRA model's trained names differ: only these are new)
        self.added = {n for n in self.params if n.endswith(llama_layout.ZERO_BIAS)} if llama is not None else set()

    def specs(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) of every tensor the export's weights hold, in the stock class's order, tied weights once
        and the keys it never saves left out, as ``save_pretrained`` decides."""
        from transformers.modeling_utils import remove_tied_weights_from_state_dict
        state = self.model.state_dict()
        for key in self.model._keys_to_ignore_on_save or []:
            state.pop(key, None)
        state = remove_tied_weights_from_state_dict(state, self.model)
        return [(name, tuple(t.shape)) for name, t in state.items()]

    def value(self, name: str) -> torch.Tensor:
        if name not in self.params:  # a persistent buffer: as the constructor made it
            return self.model.get_buffer(name).detach().float()
        if name in self.added:
            return torch.zeros(tuple(self.model.get_parameter(name).shape))
        if name in self.joined:
            return extend.stock_value(self.joined[name], self.values)
        if self.method is not None and self.method.export == "trelm":
            return self.trelm_value(name)
        if lora.is_lora_base(self.trained, name):
            return lora.merged_value(self.trained, name, self.values)
        return self.values(name)

    def trelm_value(self, name: str) -> torch.Tensor:
        """004's export: the target language row folded into the token types, the TRILayer and that row (as
        ``output_language``) under the base model's ``trelm``."""
        from xpt_ds.trelm.model import TARGET
        lang = lambda: self.values("trelm.language_embeddings.weight")[TARGET]  # noqa: E731
        if name == f"{self.prefix}.embeddings.token_type_embeddings.weight":
            return self.values(name) + lang()
        if name == f"{self.prefix}.trelm.output_language":
            return lang().clone()
        if name.startswith(f"{self.prefix}.trelm.trilayer."):
            return self.values(name.removeprefix(f"{self.prefix}."))
        return self.values(name)


def write_model(exported: Exported, out: Path, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> list[str]:
    """The export's weights (streamed, one tensor in memory at a time), config.json, generation_config.json (a
    model that generates) and the code it ships into ``out``; returns the weight files written."""
    specs = exported.specs()
    writer = ShardedWriter(out, [(n, s, EXPORT_DTYPES[exported.dtype]) for n, s in specs], max_shard_bytes)
    try:
        for name, _ in specs:
            writer.write(name, exported.value(name))
        files = writer.close()
    except BaseException:
        writer.abort()
        raise
    exported.model.config.save_pretrained(out)
    pin_attention(out / "config.json", exported.model.config)
    if exported.model.can_generate():
        exported.model.generation_config.save_pretrained(out)
    if exported.code is not None:
        shutil.copy(OWN_CODE[exported.code], out / exported.code)
    for note in exported.notes:
        print(note, file=sys.stderr)
    return files


def pin_attention(config_json: Path, config) -> None:
    """Name the attention the model trained with in ``config_json`` where a loader could pick another
    (``xpt_ds.model.decoder.pinned_attention``); ``from_pretrained(..., attn_implementation=...)`` still
    overrides it."""
    from xpt_ds.model.decoder import pinned_attention
    kernel = pinned_attention(config)
    if kernel is not None:
        written = json.loads(config_json.read_text())
        written["attn_implementation"] = kernel
        config_json.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")


def save_model(model: nn.Module, out: Path, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> None:
    """What ``xpt-ds export`` writes for ``model``, a trained model in memory (its tokenizer aside)."""
    params = dict(model.named_parameters())
    write_model(Exported(model.config, lambda name: params[name].detach().float()), out, max_shard_bytes)


def export(run_dir: Path, out: Path, tag: str | None = None, allow_pickle: bool = False,
           max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, dtype: str = "float32") -> Path:
    """Write the export into a new folder beside ``out``, then put it in place of ``out``: an export stopped
    half-way leaves ``out`` as it was, and the files of an earlier export there are replaced whole (none of them,
    such as a ``spm.model`` a keep_vocab export does not write, stays beside the new one). Files the earlier
    export did not write (its ``xpt_export.json`` lists those it did; a model card a user added) are kept. A
    non-empty ``out`` that is not an xpt-ds export is refused before the checkpoint is read. The export's model
    card, ``README.md`` (``xpt_ds.export.model_card``), is written unless ``out`` holds one of the user's own.
    ``dtype``: what the weight files hold (``EXPORT_DTYPES``; ``Exported`` checks it).

    ``out`` is resolved first: ``--out .`` is the working directory, a symbolic link is its directory (the link
    stays). A directory that cannot be renamed or should not be (a mount point; the working directory or one
    above it) is filled where it is: the export is written in a folder inside it, then moved in file by file
    (``out_dir.fill_in_place``: a stop there leaves no config.json, and the next export replaces what is there
    whole)."""
    out = Path(out).resolve()
    out_dir.check_export_out(out)
    in_place = out_dir.in_place(out)
    why = unwritable(out if in_place else out.parent)  # before the checkpoint is read (minutes for a large model)
    if why is not None:
        raise OSError(f"--out {out}: cannot write there ({why})")
    tag_dir, hf_config = checkpoint_config(run_dir, tag)
    tag_checks.check_files(tag_dir, allow_pickle, distributed=False)  # before the client state is read
    client = migrate.client_state(store.read_client_state(tag_dir.parent, tag_dir.name, allow_pickle))
    run_cfg = read_checkpoint_config(client["config"])
    data = run_cfg.data
    hf_config.xpt_data = {k: getattr(data, k) for k in MASKING_KEYS}  # evaluate --model masks as the run did
    tok = saved_tokenizer(tag_dir, run_cfg.model.mask_token)  # the mask piece the run trained with
    # hf_config copied with xpt_data: the export's config; a Qwen2 target of its own vocabulary in Llama's form
    exported = Exported(hf_config, None, dtype, llama_form=tok.kind != "huggingface")
    exported.values = described(CheckpointValues(tag_dir.parent, tag_dir.name, allow_pickle), exported.trained,
                                tag_dir)  # a config.json of another model: one line, before anything is written
    staging = out_dir.new_staging(out, in_place)
    try:
        write_model(exported, staging, max_shard_bytes)
        if tok.kind == "huggingface" and is_decoder(hf_config):  # extend, keep_vocab: set as training read text
            otherwise = export_causal_hf_tokenizer(tok, staging, hf_config.xpt_max_length)
            if otherwise:
                print(f"warning: stock AutoTokenizer loads the tokenizer of {out} otherwise than training read text: "
                      f"{otherwise}", file=sys.stderr)
        elif tok.kind == "huggingface":  # an encoder's keep_vocab: the source's own tokenizer, as its checkpoint has it
            copy_hf_tokenizer(tok.path, staging)
            loadable_by_transformers_4(staging)
        else:
            save_hf_tokenizer(tok, staging, model_max_length=hf_config.xpt_max_length, causal=is_decoder(hf_config),
                              token_types=getattr(hf_config, "type_vocab_size", 1))
            warn_auto_tokenizer(staging, "this export's", out, exported.model.config.model_type)
        users_card = (out / CARD).is_file() and not out_dir.written_by_earlier(out)(CARD)  # the user's: kept
        if not users_card:
            sizes = {n: p.numel() for n, p in exported.trained.named_parameters()}
            write_card(staging / CARD, build_card(run_dir, tag_dir, client, is_decoder(hf_config), sizes, out.name,
                                                  dtype, exported.notes))
        out_dir.record_files(staging)
        for name, replaced in out_dir.carry_own_files(out, staging, copy=not in_place):
            print(f"{'warning: replaced' if replaced else 'kept'} {out / name}: not a file of the earlier export"
                  f"{', but this export writes one of that name' if replaced else ''}"
                  f"{'; so the export writes no model card (remove it for one)' if name == CARD else ''}",
                  file=sys.stderr)
        (out_dir.fill_in_place if in_place else out_dir.put_in_place)(staging, out)
    except Exception as e:  # the tokenizer's and safetensors' write errors are no OSError and name no file
        raise write_error(e, out) or e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def auto_tokenizer_override(model_dir: Path) -> str | None:
    """The class name stock ``AutoTokenizer`` gives ``model_dir``'s tokenizer when it encodes text otherwise than
    the fast tokenizer written there (``rebuilt_by_auto``); None when they agree, or when AutoTokenizer cannot load
    the directory without its code (an adapters export)."""
    from transformers import AutoTokenizer

    try:
        auto = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False)
    except Exception:  # noqa: BLE001 - a directory that needs its code to load: nothing to compare here
        return None
    return type(auto).__name__ if rebuilt_by_auto(model_dir, auto) else None


def warn_auto_tokenizer(model_dir: Path, whose: str, shown: Path, model_type: str) -> None:
    """The ``warning:`` line for a model directory (shown as ``shown``) whose tokenizer stock ``AutoTokenizer``
    rebuilds with other ids (``auto_tokenizer_override``); nothing where it does not. An export says it, and so
    does ``finetune --save-model`` for the model it saves."""
    overridden = auto_tokenizer_override(model_dir)
    if overridden:
        print(f"warning: stock AutoTokenizer loads {whose} tokenizer as {overridden}, which rebuilds it and gives "
              f"other ids than its spm.model (transformers overrides the class it reads for model_type "
              f"{model_type}); load it with PreTrainedTokenizerFast.from_pretrained('{shown}'), as xpt-ds evaluate "
              "and finetune do", file=sys.stderr)
