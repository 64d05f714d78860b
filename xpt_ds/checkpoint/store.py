"""Checkpoints: DeepSpeed engine state + per-rank state + fp32 frozen weights + a completion marker.

Layout of ``RUN_DIR/checkpoints/TAG/``:
- DeepSpeed's own files (``mp_rank_*``, ``*_optim_states.pt``), client state = trainer/data state + config + every
  parameter's tags (which came from the source: a resume builds the model without the source's weights);
- ``rank_state_{rank:05d}.pt`` per rank (RNG states: DeepSpeed saves client state from one rank only), plain
  data (tensors, ints, lists) that ``torch.load(weights_only=True)`` reads;
- ``frozen_fp32.safetensors``: exact fp32 values of the parameters frozen in the current phase (the engine holds
  them only in the compute dtype), streamed by rank 0 one tensor at a time (checkpoints written before
  2026-11-28 hold ``frozen_fp32.pt``, which is read as well). They do not change within a phase, so every later
  checkpoint of the phase hard-links the file its first (or the one the run resumed from) wrote: no second copy
  on disk, nothing to write at a preemption (a file system without hard links gets a copy);
- ``hf_config/``: the target model's HF config (export builds the skeleton from it); beside it ``spm.model``,
  the target tokenizer (a keep_vocab run: the source's tokenizer files in ``hf_tokenizer/``);
- ``COMPLETE``: written by rank 0 after a barrier, last; it records the step, world size and ZeRO stage.
  A tag without it does not count (``xpt_ds.checkpoint.tags``: the marker, tag names, ``best``). DeepSpeed's
  ``latest`` file is not written (``save_latest=False``) and never trusted;
- ``universal/``: made on demand when a run resumes at another world size or ZeRO stage (DeepSpeed's
  ``ds_to_universal``, one folder per parameter; ``xpt_ds.checkpoint.universal``); rebuilt if a conversion was
  interrupted, deleted once a newer checkpoint is complete.

Every file is read through ``xpt_ds.io.trust`` (no pickle runs code), and DeepSpeed's own files are checked
there before DeepSpeed unpickles them, unless ``checkpoint.allow_pickle`` says the user trusts them.

``RUN_DIR/best.json`` (checkpoint.keep_best): the run's best checkpoint, which ``keep_last`` never deletes and the
tag name ``best`` resolves to (``xpt_ds.training.best``).

``RUN_DIR/checkpoints/phase_ends/``: what phases ended with, for later ones (``xpt_ds.checkpoint.phase_ends``).
``RUN_DIR/checkpoints/abandoned/branch-N/``: what a resume from an older tag left behind, the later checkpoints and (in
``phase_ends/``) the phase ends they kept after that tag (``xpt_ds.checkpoint.branches``).
"""
from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import shutil
from pathlib import Path

import deepspeed
import torch

from xpt_ds.checkpoint.frozen import FrozenWeights
from xpt_ds.checkpoint.migrate import FROZEN, frozen_file
from xpt_ds.checkpoint.rng import rng_state
from xpt_ds.checkpoint.tags import MARKER, CheckpointError, complete_tags
from xpt_ds.checkpoint.universal import mapped_universal_loads
from xpt_ds.checkpoint.values import ValueFile, write_values
from xpt_ds.config import TrainConfig, read_checkpoint_config
from xpt_ds.data.tokenizer import HF_TOKENIZER_DIR, copy_hf_tokenizer
from xpt_ds.errors import first_line
from xpt_ds.io.paths import unwritable
from xpt_ds.io.trust import UntrustedError, load_plain

log = logging.getLogger(__name__)


def _atomic_torch_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def agree(problem: str | None) -> bool:
    """True when any rank has a problem (one all-reduce), so that every rank stops, not only the one that
    saw it while the others wait in a collective."""
    failed = torch.tensor([problem is not None], dtype=torch.int32,
                          device=deepspeed.get_accelerator().current_device_name())
    deepspeed.comm.all_reduce(failed)
    return bool(failed.item())


def _preflight(ckpt_root: Path, newest: str | None, rank: int) -> str | None:
    """Why this rank cannot write a checkpoint (not writable, or less free space than the newest complete
    checkpoint takes, not counting its derived universal copy, whole or as a conversion stopped mid-write left it
    in ``universal.tmp/``: a save does not write them), or None."""
    why = unwritable(ckpt_root, rank)
    if why is not None:
        return f"cannot write checkpoints in {ckpt_root}: {why}"
    if newest is not None:
        tag_dir = ckpt_root / newest
        need = sum(f.stat().st_size for f in tag_dir.rglob("*")
                   if f.is_file() and f.relative_to(tag_dir).parts[0] not in ("universal", "universal.tmp"))
        free = shutil.disk_usage(ckpt_root).free
        if free < need:
            return (f"not enough space for a checkpoint in {ckpt_root}: {free / 2**20:.1f} MiB free, the newest "
                    f"one ({newest}) takes {need / 2**20:.1f} MiB")
    return None


def check_writable(ckpt_root: Path, rank: int, newest: str | None = None) -> None:
    """Raise CheckpointError on every rank when any rank cannot write in ``ckpt_root`` (``_preflight``; with
    ``newest``, also when it has less free space than that checkpoint takes). ``build_trainer`` calls it at start,
    before the model is built, so that a directory no rank can write in (permissions, a read-only mount, an
    immutable directory) fails the run then, not at its first save after ``checkpoint.every_steps`` steps of
    training; ``save`` calls it with ``newest`` before writing: free space changes while a run trains."""
    problem = _preflight(ckpt_root, newest, rank)
    if agree(problem):
        raise CheckpointError(problem or f"another rank cannot write checkpoints in {ckpt_root} (see its error)")


def save(engine, ckpt_root: Path, tag: str, client_state: dict, frozen: FrozenWeights, hf_config,
         tokenizer: str, rank_state: dict | None = None) -> None:
    """Write checkpoint ``tag`` on every rank, ``client_state`` (rank 0's) in DeepSpeed's files and ``rank_state``
    (default: this rank's RNG) in ``rank_state_RANK.pt``; the marker comes last. A rank that cannot write raises
    CheckpointError naming the path and the cause (before writing anything when every rank can tell: not
    writable or too little space); the complete checkpoints already there are never touched."""
    rank = deepspeed.comm.get_rank()
    tag_dir = ckpt_root / tag
    newest = ([t for t in complete_tags(ckpt_root) if t != tag] or [None])[-1]  # what survives a failure here
    check_writable(ckpt_root, rank, newest)
    try:
        if rank == 0 and tag_dir.exists():  # re-saving a tag (a run resumed from an older one): start from
            (tag_dir / MARKER).unlink(missing_ok=True)  # nothing, so no file of an earlier save stays
            shutil.rmtree(tag_dir)
        deepspeed.comm.barrier()
        # the frozen parameters are in frozen_fp32.safetensors: DeepSpeed's module states leave them out (at 8B in
        # phase 1, some 15 GB a checkpoint not written twice)
        engine.save_checkpoint(str(ckpt_root), tag=tag, client_state=client_state, save_latest=False,
                               exclude_frozen_parameters=True)
        _atomic_torch_save({"rng": rng_state()} if rank_state is None else rank_state,
                           tag_dir / f"rank_state_{rank:05d}.pt")
        _save_frozen(frozen, tag_dir, rank)
        if rank == 0:
            hf_config.save_pretrained(tag_dir / "hf_config")
            if Path(tokenizer).is_file() and not tokenizer.endswith(".gguf"):
                shutil.copyfile(tokenizer, tag_dir / "spm.model")
            else:  # keep_vocab: the source's Hugging Face tokenizer (a directory, hub id or .gguf file)
                copy_hf_tokenizer(tokenizer, tag_dir / HF_TOKENIZER_DIR)
        deepspeed.comm.barrier()  # rank 0's temporary files (frozen_fp32.safetensors.writing/) are gone
        _fsync_own_files(tag_dir, rank)
        deepspeed.comm.barrier()  # every rank's files are on disk before the marker
        if rank == 0:
            _write_marker(tag_dir, {"global_step": client_state["trainer"]["global_step"],
                                    "world_size": deepspeed.comm.get_world_size(),
                                    "zero_stage": engine.zero_optimization_stage()})
        deepspeed.comm.barrier()
    except (OSError, RuntimeError) as e:  # torch.save reports a failed write as a RuntimeError
        intact = f"the newest complete checkpoint ({newest}) is intact" if newest else "no complete checkpoint yet"
        if _peer_failed(e):
            raise CheckpointError(f"stopped writing checkpoint {tag_dir} on rank {rank} because another rank "
                                  f"failed (its error names the cause); {intact}") from None
        raise CheckpointError(f"cannot write checkpoint {tag_dir} on rank {rank}: {_write_error(e, tag_dir)}; "
                              f"{intact}") from None


def _save_frozen(frozen: FrozenWeights, tag_dir: Path, rank: int) -> None:
    """``frozen`` into ``tag_dir`` (collective): rank 0 hard-links ``frozen.file`` when that file is still there;
    else every rank takes part in gathering each value in turn and rank 0 streams them into
    ``frozen_fp32.safetensors`` (one tensor in memory at a time), which later saves of the phase link."""
    linked = False
    if rank == 0 and frozen.file is not None and Path(frozen.file).is_file():
        dest = tag_dir / Path(frozen.file).name  # a resumed old checkpoint's frozen_fp32.pt stays a .pt
        try:
            os.link(frozen.file, dest)
            linked = True
        except OSError as e:  # no hard links here (EPERM, EXDEV, EMLINK, ...): write a copy
            log.info("cannot link %s to %s (%s): writing the frozen weights again", frozen.file, dest, e.strerror or e)
    flag = torch.tensor([linked], dtype=torch.int32, device=deepspeed.get_accelerator().current_device_name())
    deepspeed.comm.broadcast(flag, src=0)
    if not flag.item():
        dest = tag_dir / f"{FROZEN}.safetensors"
        write_values(dest, [(n, frozen.shape(n)) for n in frozen.names()], frozen.full, rank)
        frozen.file = dest
    else:
        frozen.file = tag_dir / Path(frozen.file).name


def _write_marker(tag_dir: Path, record: dict) -> None:
    tmp = tag_dir / (MARKER + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(record))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, tag_dir / MARKER)
    fsync_dir(tag_dir)


def _peer_failed(e: Exception) -> bool:
    """A collective inside DeepSpeed's save that broke because another rank left it (gloo: 'Connection closed
    by peer', NCCL: a communicator error or timeout), not a write of this rank's."""
    if isinstance(e, torch.distributed.DistError):
        return True
    text = str(e).lower()
    return any(k in text for k in ("connection closed by peer", "connection reset by peer", "gloo", "nccl",
                                   "broken pipe", "timed out"))


def _write_error(e: Exception, tag_dir: Path) -> str:
    """The cause of a failed write, as the OS said it. torch.save reports ENOSPC as a RuntimeError from its
    zip writer ('[enforce fail at inline_container.cc] . unexpected pos ...') with no errno; then a probe
    write into the same directory asks the OS (ENOSPC, EACCES, EROFS, EDQUOT)."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    try:
        with open(tag_dir / f".write_probe_{os.getpid()}", "wb") as f:
            f.write(b"\0" * (1 << 20))
            f.flush()
            os.fsync(f.fileno())
    except OSError as probe:
        return probe.strerror or str(probe)
    finally:
        (tag_dir / f".write_probe_{os.getpid()}").unlink(missing_ok=True)
    if shutil.disk_usage(tag_dir).free == 0:
        return os.strerror(errno.ENOSPC)
    return str(e).strip().splitlines()[0]


def _fsync_own_files(tag_dir: Path, rank: int) -> None:
    """Flush to disk the files this rank wrote (DeepSpeed does not fsync): its ZeRO shard and RNG file;
    rank 0 also everything that is not per rank. Power loss then cannot leave a marker without its files."""
    for f in (tag_dir.rglob("*") if rank == 0 else tag_dir.glob(f"*zero_pp_rank_{rank}_*")):
        mine = f"zero_pp_rank_{rank}_" in f.name  # also bf16_zero_pp_rank_*; rank_state_* is fsynced already
        shared = "zero_pp_rank_" not in f.name and not f.name.startswith("rank_state_")
        if f.is_file() and (mine or (rank == 0 and shared)):
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    if rank == 0:
        fsync_dir(tag_dir)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_client_state(ckpt_root: Path, tag: str, allow_pickle: bool = False) -> dict:
    """Client state without building an engine (it is in the rank-0 model-states file), read as plain data."""
    files = sorted((ckpt_root / tag).glob("*mp_rank_00_model_states.pt"))
    if not files:
        raise CheckpointError(f"checkpoint {ckpt_root / tag} has no model-states file (*mp_rank_00_model_states.pt)")
    try:
        return load_plain(files[0], allow_pickle=allow_pickle, mmap=True)
    except UntrustedError:
        raise
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as e:  # truncated, not a torch file
        why = first_line(e)
        raise CheckpointError(f"cannot read checkpoint {ckpt_root / tag}: {files[0].name}: {why}") from None


def read_config(ckpt_root: Path, tag: str, allow_pickle: bool = False) -> TrainConfig:
    """The resolved run config saved with checkpoint ``tag``."""
    return read_checkpoint_config(read_client_state(ckpt_root, tag, allow_pickle)["config"])


def _mapped_loads(engine, allow_pickle: bool) -> None:
    """DeepSpeed's torch checkpoint engine reads a file whole (``torch.load``), so every rank of a ZeRO-1/2 run
    would hold the whole module state file in memory while it loads; memory-mapped (copy-on-write, the file is never
    written), each rank reads the pages it copies out. The files were checked (``tag_checks``) and are read as
    plain data here too (``load_plain``), unless ``allow_pickle``."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    if isinstance(engine.checkpoint_engine, TorchCheckpointEngine):
        engine.checkpoint_engine.load = lambda path, map_location=None: load_plain(
            path, allow_pickle=allow_pickle, mmap=True)


# What a loaded param group keeps from the checkpoint: its parameters, FusedAdam's step count, and the learning
# rate, which the trainer sets before every step from the phase's schedule.
LOADED_GROUP_KEYS = ("params", "step", "lr")


def _hyperparameters(optimizer) -> list[dict]:
    """Each param group's settings as this run built them (optim.betas, eps, weight_decay and the optimizer's own
    flags), to put back after a load: torch's ``load_state_dict`` replaces each group by the saved one, so a
    resume with another optim.betas or eps would go on with the checkpoint's, silently, and one with another
    optimizer (optim.torch_adam) would lose the keys its step reads (FusedAdam's ``bias_correction``); DeepSpeed's
    ZeRO-3 universal load gives every group the first saved group's (the no-decay group would decay); and a ZeRO-3
    checkpoint from before 2026-12-02 holds weight decay 0 (``xpt_ds.model.weight_decay``)."""
    return [{k: v for k, v in g.items() if k not in LOADED_GROUP_KEYS} for g in optimizer.param_groups]


def _own_step_counts(optimizer) -> None:
    """Each parameter's Adam step count as this run's optimizer keeps it: torch's AdamW in a tensor, FusedAdam and
    DeepSpeedCPUAdam in an int they hand to their kernels; a checkpoint of the other (optim.torch_adam changed on a
    resume) holds the other kind. Every tensor count is a copy of its own: DeepSpeed's ZeRO-3 universal load gives
    every param group the same ``step`` tensor, which torch's AdamW would then advance once per group per step."""
    as_tensor = isinstance(optimizer, torch.optim.Adam)  # torch's AdamW (and its slice-wise step) subclass it
    for state in optimizer.state.values():
        step = state.get("step")
        if step is None:
            continue
        if as_tensor:
            state["step"] = step.clone() if torch.is_tensor(step) else torch.tensor(float(step))
        elif torch.is_tensor(step):
            state["step"] = int(step.item())


def load(engine, ckpt_root: Path, tag: str, universal: bool = False,
         allow_pickle: bool = False) -> tuple[ValueFile, dict]:
    """Restore the engine; returns (the checkpoint's frozen fp32 weights file (memory-mapped), whose values the caller
    puts into the engine and its ``FrozenWeights`` (``xpt_ds.training.fill``); this rank's state file, for the
    registry's per-rank pieces (``xpt_ds.checkpoint.registry``), empty where the tag has none). The caller has
    passed the tag's files through ``tag_checks.check_files``.

    ``universal``: the engine was built with ``checkpoint.load_universal`` and loads ``TAG/universal``.
    That path restores only the optimizer's (trainable) parameters, not the module state dict; the
    frozen ones come from the returned file either way."""
    tag_dir = ckpt_root / tag
    _mapped_loads(engine, allow_pickle)
    base = getattr(engine.optimizer, "optimizer", engine.optimizer)
    built = _hyperparameters(base)
    if universal:
        # a rank reads its slice of each parameter's files, not all; ZeRO-1/2 every group's
        with mapped_universal_loads(allow_pickle, len(base.param_groups)):
            engine.load_checkpoint(str(tag_dir), tag="universal")
    else:  # not strict: the module states hold the trainable parameters only (``save``); the frozen ones come
        # from the returned file, and the config was checked against the tag's (``tag_checks.resumed_tags``)
        engine.load_checkpoint(str(ckpt_root), tag=tag, load_module_strict=False)
    for group, kept in zip(base.param_groups, built):
        group.update(kept)
    _own_step_counts(base)
    return ValueFile(frozen_file(tag_dir), allow_pickle), load_rank_state(tag_dir, allow_pickle)


def load_rank_state(tag_dir: Path, allow_pickle: bool = False) -> dict:
    """This rank's state file of checkpoint ``tag_dir``; empty where it has none (a rank the saving run did not
    have)."""
    rank_file = tag_dir / f"rank_state_{deepspeed.comm.get_rank():05d}.pt"
    # plain since issue 19; older ones hold a numpy array, which load_plain allows (``migrate.numpy_rng_key``)
    return load_plain(rank_file, allow_pickle=allow_pickle) if rank_file.is_file() else {}
