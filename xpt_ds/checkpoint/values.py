"""A checkpoint's exact fp32 values one parameter at a time, and the value files xpt-ds writes beside DeepSpeed's.

Reading (``CheckpointValues``): the frozen parameters from ``frozen_fp32.safetensors`` (``frozen_fp32.pt`` in
checkpoints written before 2026-11-28), the trainable ones from DeepSpeed's fp32 partitions, every file memory-mapped
and each value assembled only when asked for. The layouts are DeepSpeed 0.19's, as ``deepspeed.utils.zero_to_fp32``
reconstructs them (tests compare the two bit for bit): at ZeRO-0 the module's state dict; at ZeRO-1/2 each
parameter group's flat fp32 partitions of all ranks, concatenated, hold its parameters in ``param_shapes``' order
(each followed by its alignment padding); at ZeRO-3 each rank's groups, concatenated, hold a ceil(n / world)
partition of every parameter in turn. ``zero_to_fp32`` itself concatenates whole groups (ZeRO-2) and builds the
whole state dict: an 8B model's export would hold it twice.

Writing (``write_values``): rank 0 streams a safetensors file from a values function that every rank calls in the
same order (collective under ZeRO), so no rank ever holds more than one whole tensor; the frozen weights of a
checkpoint and the phase ends are written this way.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from xpt_ds.checkpoint.migrate import frozen_file
from xpt_ds.checkpoint.tags import CheckpointError
from xpt_ds.config.engine_json import zero_stage
from xpt_ds.errors import first_line
from xpt_ds.io.safetensors_files import DTYPES, ShardedWriter
from xpt_ds.io.trust import load_plain

NO_SHARDS = 2**62  # one file, however large


def _range(chunks: list[torch.Tensor], start: int, length: int) -> torch.Tensor:
    """Elements [start, start + length) of the concatenation of 1-D ``chunks``, without concatenating them."""
    pieces, base = [], 0
    for chunk in chunks:
        n = chunk.numel()
        lo, hi = max(start, base), min(start + length, base + n)
        if lo < hi:
            pieces.append(chunk[lo - base:hi - base])
        base += n
        if base >= start + length:
            break
    return torch.cat(pieces) if len(pieces) != 1 else pieces[0]


class ValueFile:
    """A file of named fp32 tensors (safetensors, or an older checkpoint's plain torch file), memory-mapped;
    ``get`` copies one out. A safetensors file whose header does not cover it (cut short) is a CheckpointError
    naming it."""

    def __init__(self, path: Path, allow_pickle: bool = False):
        self.path = Path(path)
        if self.path.suffix == ".safetensors":
            try:
                self.reader = safe_open(str(self.path), framework="pt")
            except SafetensorError as e:
                raise CheckpointError(f"cannot read {self.path}: {first_line(e)} (cut short, or not a safetensors "
                                      "file)") from None
            self.keys = list(self.reader.keys())
        else:
            self.reader = load_plain(self.path, allow_pickle=allow_pickle, mmap=True)
            self.keys = list(self.reader)

    def get(self, name: str) -> torch.Tensor:
        if self.path.suffix == ".safetensors":
            return self.reader.get_tensor(name).to(torch.float32)
        return self.reader[name].to(torch.float32, copy=True)

    def __contains__(self, name: str) -> bool:
        return name in self.keys


class CheckpointValues:
    """``values(name)``: the exact fp32 value of module parameter ``name`` (the training module's names: ``hf.``
    first) in checkpoint ``ckpt_root/tag``, whole, on the CPU. The caller has checked the tag's files
    (``tag_checks.check_files``) unless ``allow_pickle``."""

    def __init__(self, ckpt_root: Path, tag: str, allow_pickle: bool = False):
        tag_dir = Path(ckpt_root) / tag
        self.frozen = ValueFile(frozen_file(tag_dir), allow_pickle)
        states = sorted(tag_dir.glob("*mp_rank_00_model_states.pt"), key=_rank_of)
        model = load_plain(states[0], allow_pickle=allow_pickle, mmap=True)
        self.stage = zero_stage(model["ds_config"])
        self.where: dict[str, tuple] = {}
        self.loss_scale = None  # an fp16 run's dynamic loss scale when it saved, which fp32 values do not carry
        if self.stage == 0:  # fp32 only (engine.load_ds_config refuses bf16 at stage 0): the module is the master
            self.module = model["module"]
            self.where = {n: ("module",) for n in self.module}
        else:
            optim = [load_plain(f, allow_pickle=allow_pickle, mmap=True)["optimizer_state_dict"]
                     for f in sorted(tag_dir.glob("*zero_pp_rank_*_mp_rank_00_optim_states.pt"), key=_rank_of)]
            self._layout(model, optim)
            if optim[0].get("dynamic_loss_scale") and model["ds_config"].get("fp16", {}).get("enabled"):
                self.loss_scale = float(optim[0]["loss_scaler"].cur_scale)
        self.shared = dict(model.get("shared_params") or {})  # tied name -> the name its value is under

    def _layout(self, model: dict, optim: list[dict]) -> None:
        world = len(optim)
        if self.stage <= 2:
            self.groups = [[o["single_partition_of_fp32_groups"][g] for o in optim]
                           for g in range(len(optim[0]["single_partition_of_fp32_groups"]))]
            paddings = optim[0].get("param_alignment_paddings")
            for g, shapes in enumerate(model["param_shapes"]):
                offset = 0
                for i, (name, shape) in enumerate(shapes.items()):
                    n = math.prod(shape)
                    self.where[name] = ("z2", g, offset, tuple(shape))
                    offset += n + (paddings[g][i] if paddings is not None else 0)
        else:
            self.ranks = [list(o["fp32_flat_groups"]) for o in optim]
            offset = 0
            for shapes in model["param_shapes"]:
                for name, shape in shapes.items():
                    part = math.ceil(math.prod(shape) / world)  # zero_to_fp32.zero3_partitioned_param_info
                    self.where[name] = ("z3", offset, part, tuple(shape))
                    offset += part

    def names(self) -> list[str]:
        return list(self.where) + [n for n in self.frozen.keys if n not in self.where]

    def __call__(self, name: str) -> torch.Tensor:
        name = self.shared.get(name, name)
        if name in self.frozen and name not in self.where:
            return self.frozen.get(name)
        where = self.where.get(name)
        if where is None:
            raise KeyError(f"checkpoint holds no value for {name}")
        if where[0] == "module":
            return self.module[name].to(torch.float32, copy=True)
        if where[0] == "z2":
            _, g, offset, shape = where
            return _range(self.groups[g], offset, math.prod(shape)).to(torch.float32, copy=True).reshape(shape)
        _, offset, part, shape = where
        pieces = [_range(groups, offset, part) for groups in self.ranks]
        return torch.cat(pieces)[:math.prod(shape)].to(torch.float32).reshape(shape)


def _rank_of(path: Path) -> int:
    """zero_pp_rank_R_... -> R (sorted as numbers: rank 10 after rank 9); 0 for the one model-states file."""
    name = path.name
    if "zero_pp_rank_" not in name:
        return 0
    return int(name.split("zero_pp_rank_")[1].split("_")[0])


def write_values(path: Path, specs: list[tuple[str, tuple[int, ...]]], values: Callable[[str], torch.Tensor],
                 rank: int, digest: bool = False) -> str | None:
    """Every rank calls ``values(name)`` for each of ``specs`` in order (collective under ZeRO); rank 0 writes them
    as one float32 safetensors file ``path`` (atomically: a temporary name, renamed once complete and synced).
    With ``digest``, the blake2b of names, dtypes, shapes and bytes in that order (``state_digest``'s, when
    ``specs`` is sorted by name)."""
    h = hashlib.blake2b(digest_size=16) if digest else None
    writer = None
    if rank == 0:
        tmp = path.parent / (path.name + ".writing")
        tmp.mkdir(parents=True, exist_ok=True)
        writer = ShardedWriter(tmp, [(n, s, torch.float32) for n, s in specs], NO_SHARDS,
                               name=path.name.removesuffix(".safetensors"))
    try:
        for name, shape in specs:
            value = values(name)
            if writer is not None:
                value = value.to(torch.float32).contiguous()
                writer.write(name, value)
                if h is not None:
                    _hash(h, name, value)
        if writer is not None:
            writer.close()
            os.replace(tmp / path.name, path)
            tmp.rmdir()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    return h.hexdigest() if h is not None else None


def state_digest(state: dict[str, torch.Tensor]) -> str:
    """blake2b over every tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(state):
        _hash(h, name, state[name].detach().cpu().contiguous())
    return h.hexdigest()


def _hash(h, name: str, t: torch.Tensor) -> None:
    """One tensor into a digest: its name, dtype and shape, then its bytes (``state_digest``'s order)."""
    h.update(_label(name, t.dtype, tuple(t.shape)))
    h.update(t.reshape(-1).view(torch.uint8).numpy().data)


def _label(name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> bytes:
    return f"{name}:{dtype}:{shape};".encode()


TORCH_DTYPES = {code: dtype for dtype, code in DTYPES.items()}


def file_digest(path: Path, chunk: int = 1 << 26) -> str:
    """``state_digest`` of the tensors a safetensors file holds, read from the file's bytes in name order,
    ``chunk`` bytes at a time (no tensor is built: memory stays at one chunk, and the cost is one sequential read
    of the file, some 30 GB for an 8B model's fp32 weights). A file its header does not cover is a
    CheckpointError naming it."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        try:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
            header.pop("__metadata__", None)
            for name in sorted(header):
                info = header[name]
                h.update(_label(name, TORCH_DTYPES[info["dtype"]], tuple(info["shape"])))
                begin, end = info["data_offsets"]
                f.seek(8 + size + begin)
                while begin < end:
                    data = f.read(min(chunk, end - begin))
                    if not data:
                        raise ValueError(f"{name} ends at byte {8 + size + end}, past the end of the file")
                    h.update(data)
                    begin += len(data)
        except (ValueError, KeyError, TypeError) as e:  # json's errors are ValueErrors
            raise CheckpointError(f"cannot read {path}: not a whole safetensors file ({first_line(e)})") from None
    return h.hexdigest()
