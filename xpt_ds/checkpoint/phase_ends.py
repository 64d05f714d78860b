"""What a phase ended with, kept for a later phase that starts from it or merges it (``start_from``, ``merge``):
``RUN_DIR/checkpoints/phase_ends/NAME.safetensors`` (exact fp32 weights) and ``NAME.json`` (the data position and
the weights' digest), outside every tag, so ``keep_last`` never deletes them (``NAME.pt`` before 2026-11-28)."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import deepspeed
import torch

from xpt_ds.checkpoint.migrate import older_phase_end, older_phase_end_file
from xpt_ds.checkpoint.store import _peer_failed, _write_error, agree, fsync_dir
from xpt_ds.checkpoint.tags import CheckpointError
from xpt_ds.checkpoint.values import ValueFile, file_digest, state_digest, write_values

PHASE_ENDS = "phase_ends"


def save_phase_end(ckpt_root: Path, name: str, specs: list[tuple[str, tuple[int, ...]]],
                   values: Callable[[str], torch.Tensor], data: dict) -> str:
    """Keep what phase ``name`` ended with: exact fp32 weights (``values``, collective: every rank calls this)
    and the data stream position. Rank 0 streams ``phase_ends/NAME.safetensors`` (atomically, one tensor in
    memory at a time) and writes ``NAME.json`` (data position, digest) beside it; the trainer calls this before the
    phase's last checkpoint is saved, so a complete checkpoint after the phase's end implies the files. Returns the
    weights' blake2b (``values.state_digest``'s), which the trainer state records and ``load_phase_end`` checks."""
    rank = deepspeed.comm.get_rank()
    path = ckpt_root / PHASE_ENDS / f"{name}.safetensors"
    problem, digest = None, None
    try:
        if rank == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        digest = write_values(path, sorted(specs), values, rank, digest=True)
        if rank == 0:
            _atomic_write_text(path.with_suffix(".json"), json.dumps({"digest": digest, "data": data}))
            fsync_dir(path.parent)
    except (OSError, RuntimeError) as e:
        if _peer_failed(e):
            raise
        problem = f"cannot write {path}: {_write_error(e, path.parent)}"
    if agree(problem):
        raise CheckpointError(problem or f"rank 0 could not write {path} (see its error)")
    box = [digest]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def phase_end_files(ckpt_root: Path, name: str) -> list[Path]:
    """The files that hold phase ``name``'s end: ``NAME.safetensors`` and ``NAME.json``, or an older run's
    (``migrate.older_phase_end_file``)."""
    base = ckpt_root / PHASE_ENDS
    files = (base / f"{name}.safetensors", base / f"{name}.json", older_phase_end_file(base, name))
    return [p for p in files if p.exists()]


def load_phase_end(ckpt_root: Path, name: str, digest: str | None) -> tuple[Callable[[str], torch.Tensor], dict]:
    """(values by parameter name, data position) phase ``name`` ended with in this run, memory-mapped (each value
    read when asked for): ``digest`` is what the run recorded when the phase ended, which ``NAME.json`` and the
    weights' own bytes must match; a file from another branch of the run (e.g. one resumed from an older tag with
    another config), or copied in from another run, does not."""
    base = ckpt_root / PHASE_ENDS
    path = base / f"{name}.safetensors"
    if digest is None:
        raise CheckpointError(f"this run's state records no end of phase '{name}' (checkpoint older than the phase "
                              f"graph?); cannot start from {path}")
    older = older_phase_end(base, name)
    if older is not None:
        weights, data = older
        if state_digest(weights) != digest:
            raise CheckpointError(f"{older_phase_end_file(base, name)} is not what phase '{name}' ended with in "
                                  f"this run (blake2b differs from the checkpoint's record {digest}); was it "
                                  "written by another branch of the run?")
        return weights.__getitem__, data
    if not path.is_file() or not path.with_suffix(".json").is_file():
        raise CheckpointError(f"{path} is missing: a later phase starts from the weights phase '{name}' ended "
                              f"with, kept there when it ended")
    record = _read_record(path.with_suffix(".json"), name)
    # The weights' own bytes too (a file copied in beside another run's NAME.json): one sequential read of the
    # file on every rank (some 30 GB at 8B, about 75 s at 0.4 GB/s; a node's ranks share its page cache), before
    # the fill reads the values again. The recorded digest runs over every weight in name order, the fill in the
    # module's order, some not at all (a merge): not one pass. No collective: ranks waiting on one rank's read
    # would be bound by guard.collective_timeout_s.
    if record.get("digest") != digest or file_digest(path) != digest:
        raise CheckpointError(f"{path} is not what phase '{name}' ended with in this run (blake2b differs from "
                              f"the checkpoint's record {digest}); was it written by another branch of the run, or "
                              "copied from another run?")
    file = ValueFile(path)
    return file.get, record["data"]


def _read_record(path: Path, name: str) -> dict:
    """``NAME.json`` as ``save_phase_end`` writes it (whole, atomically): a file cut short or emptied since (a copy
    or sync gone wrong) is one line naming it, not a traceback on every rank."""
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or "data" not in record:
            raise ValueError(f"no data position in {record!r:.60}")
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not the record phase '{name}' ended with ({e}): restore it from a copy "
                              "of the run, or resume from a checkpoint before the phase ended") from None
    return record
