"""A source model's weights, read one tensor at a time from its files (``SourceFiles``), or drawn (``RandomSource``).

The builder never loads the source as a model: it reads each tensor it reuses when it fills that parameter, from
the checkpoint's safetensors files through memory maps (``safe_open``: the whole source is never in memory, and
the ranks of a node share the page cache), or from ``pytorch_model.bin`` files (memory-mapped, plain data only,
``xpt_ds.io.trust``). A directory in the hub's layout (``model-0000k-of-0000n.safetensors`` with
``model.safetensors.index.json``, bf16, fp16 or fp32) and a single file both work; a hub id is fetched into the
Hugging Face cache first (offline: it must be there). A ``.gguf`` source is dequantized by transformers, whole,
as before (GGUF sources are small quantized models).

Names are the source model's parameter names (``AutoModelFor*`` of its config, on the meta device). A file key
maps to them as transformers maps it when loading: BERT's legacy ``LayerNorm.gamma``/``beta`` become
``weight``/``bias``, and the base model's prefix (``bert.``, ``model.``, ``transformer.``) is added or dropped
when the checkpoint was saved from the base model (an encoder-only checkpoint such as all-MiniLM-L6-v2's
``BertModel``) or the other way round.

Each reused tensor's shape in the files' headers must be the one the source's config.json gives it (checked when the
files are opened, before any engine exists), and each value read must be finite (``finite``: one fp32 sum per
tensor, ``xpt_ds.model.finite``); either is one error line naming the file and the key.
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import torch
from torch import nn

from xpt_ds.config import ConfigError
from xpt_ds.errors import first_line
from xpt_ds.io.trust import UntrustedError, load_plain
from xpt_ds.model.finite import all_finite

log = logging.getLogger(__name__)

LEGACY = ((".LayerNorm.gamma", ".LayerNorm.weight"), (".LayerNorm.beta", ".LayerNorm.bias"))


# The weight files transformers loads, in its order of preference: (an index of shards, a single file).
WEIGHT_LAYOUTS = (("safetensors", "model.safetensors.index.json", "model.safetensors"),
                  ("bin", "pytorch_model.bin.index.json", "pytorch_model.bin"))


def local_snapshot(location: str, what: str) -> Path:
    """The directory of a source given as a directory or a hub id. A hub id's is its snapshot in the Hugging Face
    cache holding the weight files transformers would load and no others (fetched one by one, all from the commit
    the first one came from; offline, they must be cached): the safetensors index and the shards it names, else
    model.safetensors, else the same for .bin. A repository that also ships .bin copies, or Mistral's
    consolidated.safetensors beside its shards, is not fetched twice. A name that is neither a directory nor a hub
    id was stopped at its config (``build.source_config``)."""
    path = Path(location)
    if path.is_dir():
        return path
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RemoteEntryNotFoundError
    revision = None

    def fetch(name: str) -> Path | None:
        nonlocal revision
        try:
            found = Path(hf_hub_download(location, name, revision=revision))
        except RemoteEntryNotFoundError:  # the repository has no such file
            return None
        except LocalEntryNotFoundError:  # offline and not in the cache
            if constants.HF_HUB_OFFLINE:
                return None
            raise
        revision = revision or found.parent.name  # snapshots/<commit>/<file>
        return found

    try:
        for _, index, single in WEIGHT_LAYOUTS:
            found = fetch(index)
            if found is not None:
                for shard in sorted(set(json.loads(found.read_text())["weight_map"].values())):
                    if fetch(shard) is None:
                        raise FileNotFoundError(f"{index} names {shard}, which the repository does not hold")
                return found.parent
            found = fetch(single)
            if found is not None:
                return found.parent
    except Exception as e:  # noqa: BLE001 - the hub client's errors have no common base worth naming
        raise ConfigError(f"{what}: cannot fetch the weights of hub id '{location}': {first_line(e)}") from None
    where = " in the local Hugging Face cache (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else ""
    raise ConfigError(f"{what}: hub id '{location}' has no weights{where} (model.safetensors, "
                      "model-*-of-*.safetensors with model.safetensors.index.json, or pytorch_model.bin)")


def weight_files(directory: Path) -> tuple[str, list[Path], dict[str, str] | None]:
    """(kind 'safetensors' | 'bin', its files, the index's key -> file map or None) as transformers picks them:
    safetensors first, sharded (an index) before single."""
    for kind, index, single in WEIGHT_LAYOUTS:
        if (directory / index).is_file():
            weight_map = json.loads((directory / index).read_text())["weight_map"]
            return kind, [directory / f for f in sorted(set(weight_map.values()))], weight_map
        if (directory / single).is_file():
            return kind, [directory / single], None
    raise FileNotFoundError(f"{directory} holds no weights (model.safetensors, model-*-of-*.safetensors with "
                            "model.safetensors.index.json, or pytorch_model.bin)")


def key_map(file_keys: list[str], model_keys: set[str], base_prefix: str) -> dict[str, str]:
    """Model name -> file key for every file key that names one of ``model_keys`` (parameters and buffers of the
    source model), renamed as transformers renames on load (``LEGACY``, then the base model's prefix)."""
    out = {}
    for key in file_keys:
        name = key
        for old, new in LEGACY:
            if name.endswith(old):
                name = name[: -len(old)] + new
        if name not in model_keys and base_prefix:
            stripped = name.removeprefix(base_prefix + ".")
            if stripped != name and stripped in model_keys:
                name = stripped
            elif f"{base_prefix}.{name}" in model_keys:
                name = f"{base_prefix}.{name}"
        if name in model_keys:
            out.setdefault(name, key)
    return out


class SourceFiles:
    """The tensors of a source checkpoint's files, by the source model's parameter names.

    ``get(name)`` reads one as float32 (a copy: the file's bytes stay in the page cache, not in the process).
    ``missing``: the source model's parameters the files lack, which ``get`` draws from ``fresh`` (a
    ``StockInit`` the builder sets); ``unexpected``: file keys that name nothing of it (and are not a buffer the
    stock class drops, ``_keys_to_ignore_on_load_unexpected``)."""

    def __init__(self, source: str, directory: Path, meta_model: nn.Module, what: str):
        self.source, self.directory, self.what = source, directory, what
        self.kind, self.files, weight_map = weight_files(directory)
        self.readers: dict[Path, object] = {}
        file_of: dict[str, Path] = {}
        if weight_map is not None:
            file_of = {k: directory / f for k, f in weight_map.items()}
        else:
            file_of = {k: self.files[0] for k in self._keys(self.files[0])}
        params = {n for n, _ in meta_model.named_parameters()}
        model_keys = set(meta_model.state_dict().keys()) | params
        self.key_of = key_map(list(file_of), model_keys, meta_model.base_model_prefix)
        self.file_of = {name: file_of[key] for name, key in self.key_of.items()}
        self.names = params & set(self.key_of)
        self.missing = params - self.names
        ignore = [re.compile(p) for p in (getattr(meta_model, "_keys_to_ignore_on_load_unexpected", None) or [])]
        used = set(self.key_of.values())
        self.unexpected = {k for k in file_of if k not in used and not any(p.search(k) for p in ignore)}
        self.fresh = None
        self._check_shapes({n: tuple(p.shape) for n, p in meta_model.named_parameters() if n in self.names})

    def _check_shapes(self, shapes: dict[str, tuple]) -> None:
        """Every tensor the run reuses has the shape the source's config.json gives it (read from the files'
        headers, before any engine is built); one line naming the file and key otherwise."""
        for name, want in sorted(shapes.items()):
            path, key = self.file_of[name], self.key_of[name]
            reader = self._reader(path)
            try:
                got = tuple(reader.get_slice(key).get_shape() if self.kind == "safetensors" else reader[key].shape)
            except Exception as e:  # noqa: BLE001 - as ``get``: a damaged header shows here
                raise ConfigError(f"{self.what}: cannot read its weights ({path.name}, {key}: "
                                  f"{first_line(e)[:200]})") from None
            if got != want:
                raise ConfigError(f"{self.what}: {path.name} holds {key} of shape {list(got)}, but its config.json "
                                  f"gives {'it' if name == key else name} the shape {list(want)}")

    def _keys(self, path: Path) -> list[str]:
        return list(self._reader(path).keys())

    def _reader(self, path: Path):
        reader = self.readers.get(path)
        if reader is None:
            if len(self.files) > 1:
                log.info("reading source shard %d of %d (%s)", self.files.index(path) + 1, len(self.files), path.name)
            try:
                if self.kind == "safetensors":
                    from safetensors import safe_open
                    reader = safe_open(str(path), framework="pt")
                else:
                    reader = load_plain(path, mmap=True, flag="a safetensors copy of the source (xpt-ds reads "
                                                               "no pickle that runs code)")
            except UntrustedError as e:  # as ``reading_weights`` says it of a from_pretrained
                named = re.search(r"GLOBAL [\w.]+", str(e))
                raise UntrustedError(f"{self.what}: its weights file {path.name} is not plain data and would run "
                                     f"code when loaded{f' ({named.group(0)})' if named else ''}; xpt-ds does not "
                                     "load it (save the model as safetensors)") from None
            except Exception as e:  # noqa: BLE001 - safetensors' and torch's read errors: one line naming the file
                raise ConfigError(f"{self.what}: cannot read its weights ({path.name}: {first_line(e)[:200]})") \
                    from None
            self.readers[path] = reader
        return reader

    def get(self, name: str) -> torch.Tensor:
        if name in self.missing:  # drawn as the stock class draws it (``fresh``: set by the builder)
            return self.fresh.value(name)
        path, key = self.file_of[name], self.key_of[name]
        reader = self._reader(path)
        try:
            value = reader.get_tensor(key) if self.kind == "safetensors" else reader[key]
        except Exception as e:  # noqa: BLE001 - a truncated file shows only when a tensor in it is read
            raise ConfigError(f"{self.what}: cannot read its weights ({path.name}, {key}: {first_line(e)[:200]})") \
                from None
        # a .bin tensor is a view of the mapped file: copied, as safetensors' get_tensor copies
        return finite(value.to(torch.float32, copy=self.kind == "bin"), f"{self.what}: {path.name} holds {key}")

    def close(self) -> None:
        self.readers.clear()


def finite(value: torch.Tensor, where: str) -> torch.Tensor:
    """``value``, unless it holds NaN or inf: a source weight that would make the first step's loss NaN, which the
    trainer would then take for a bad step. One line starting with ``where`` (the file and key)."""
    if not all_finite(value):
        bad = int((~torch.isfinite(value)).sum())
        raise ConfigError(f"{where} with {bad} non-finite value(s) (NaN or inf) of {value.numel()}: the source "
                          "checkpoint is damaged")
    return value


class StateSource:
    """A source already in memory as a state dict (a GGUF file, which transformers dequantizes whole)."""

    def __init__(self, state: dict[str, torch.Tensor], missing: set[str], unexpected: set[str] = frozenset()):
        self.state, self.missing, self.unexpected = state, set(missing), set(unexpected)
        self.names = set(state) - self.missing

    def get(self, name: str) -> torch.Tensor:
        return finite(self.state[name].detach().to(torch.float32).clone(), f"the source's {name}")

    def close(self) -> None:
        self.state = {}


class RandomSource:
    """A source of random weights of the source's shape (``method: random_source``): each tensor is what the stock
    class's init gives it, from its own generator (``xpt_ds.model.values.stock_init``)."""

    def __init__(self, meta_model: nn.Module, init_seed: int):
        from xpt_ds.model.values.stock_init import StockInit
        self.init = StockInit(meta_model, init_seed)
        self.names = {n for n, _ in meta_model.named_parameters()}
        self.missing, self.unexpected = set(), set()

    def get(self, name: str) -> torch.Tensor:
        return self.init.value(name)

    def close(self) -> None:
        """Nothing to release: every value is drawn when asked for."""
