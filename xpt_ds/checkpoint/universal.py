"""Resuming at another scale: a checkpoint saved at another world size, at another ZeRO stage of 1, 2 and 3, or in
another precision (fp32, bf16, fp16) at those stages, is converted once to DeepSpeed's universal layout
(``ds_to_universal``: one folder per parameter, independent of world size) in ``TAG/universal/``, which every
rank's engine then loads (``checkpoint.load_universal``); what the resuming stage reads and the conversion did not
write is added (``universal_stages``).

Rank 0 converts, in a child process tethered to it (``xpt_ds.runtime.tether``: it does not outlive rank 0), while
the other ranks wait (``xpt_ds.runtime.distributed.rank0_alone``): the conversion reads every rank's optimizer state
and writes it out again, which for a model whose every weight trains can outlast the job's collective timeout
(DeepSpeed's 10 minutes). At the Llama-3.2-1B shape's phase 1 on a 2-core CPU (187M trained parameters, 2.25 GB
of optimizer state) it took 17 s (BENCHMARKS.md, "Resuming at another world size"); the time grows with the state.
``checkpoint.rescale_timeout_minutes`` bounds it: a conversion still running then is stopped, and every rank ends
with one line that says so. The universal copy is about 1.5 times the optimizer state (3.5 GB there); once the run
has a newer complete checkpoint, rank 0 deletes it (``drop_converted``).

Every rank reads the universal copy through memory maps (``mapped_universal_loads``): DeepSpeed's loaders read
each parameter's files whole on every rank and keep the rank's slice, so a job of N ranks would read the copy N
times.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import deepspeed
import psutil
import torch

from xpt_ds.checkpoint.migrate import regrouped
from xpt_ds.checkpoint.tags import CheckpointError, complete_tags
from xpt_ds.checkpoint.universal_stages import disk_full, fit_for, free_bytes, out_of_space
from xpt_ds.config import ConfigError
from xpt_ds.config.engine_json import layout_changes, precision, zero_stage
from xpt_ds.io.trust import load_plain
from xpt_ds.runtime.distributed import rank0_alone
from xpt_ds.runtime.tether import kill_group, tethered

log = logging.getLogger(__name__)

MAX_WORKERS = 8  # ds_to_universal's extract and merge processes; each holds about one rank's optimizer file


def prepare_rescale(ckpt_root: Path, tag: str, client: dict, world: int, ds: dict, limit_minutes: float,
                    allow_pickle: bool = False) -> str | None:
    """How this run loads ``tag`` when it was saved at another world size, ZeRO stage or precision than this run's
    ``world`` and DeepSpeed config ``ds``, under settings that lay the optimizer's partitions out otherwise
    (``layout_changes``), or with its parameters grouped otherwise (``regrouped``); DeepSpeed records its world size
    and config in the model-states file ``client`` comes from. None where none of these holds: DeepSpeed's own load.

    - ``"universal"``: through a universal checkpoint, made here once, which holds every trained parameter's fp32
      value and Adam moments whatever the precision (bf16 runs save their optimizer states under other file names
      than fp32 and fp16 ones, which the rigid load then does not find). The loader state is world-size independent
      already.
    - ``"values"``: the checkpoint's optimizer holds no Adam state (``never_stepped``), which ``ds_to_universal``
      cannot convert: the engine starts with a new optimizer, the state the checkpoint holds, and takes the
      checkpoint's fp32 values (``xpt_ds.checkpoint.values.CheckpointValues``).

    A change from or to stage 0 is refused: its checkpoint keeps the whole optimizer state in the model-states file,
    which ``ds_to_universal`` does not read."""
    stage, saved_stage = zero_stage(ds), zero_stage(client["ds_config"])
    saved_world = client["dp_world_size"]
    dtypes = precision(client["ds_config"]), precision(ds)
    mixed, layout = regrouped(client), layout_changes(client["ds_config"], ds)
    same = saved_stage == stage and (saved_world == world or stage == 0) and dtypes[0] == dtypes[1]
    if same and not mixed and not layout:
        return None  # stage 0 keeps whole optimizer states: any world size loads them
    if 0 in (saved_stage, stage) and not same:
        change = (f"at ZeRO stage {saved_stage} and this run uses stage {stage}" if saved_stage != stage
                  else f"in {dtypes[0]} and this run trains in {dtypes[1]}")
        raise ConfigError(f"checkpoint {tag} was saved {change} (config key 'deepspeed'); a resume can change the "
                          "stage only among 1, 2 and 3, and the precision only at those stages")
    fresh = never_stepped(ckpt_root / tag, allow_pickle)
    if deepspeed.comm.get_rank() == 0:
        log.info("checkpoint %s was saved by %s at ZeRO stage %d in %s%s; resuming on %s at stage %d in %s %s", tag,
                 _ranks(saved_world), saved_stage, dtypes[0], f" ({', '.join(layout)})" if layout else "",
                 _ranks(world), stage, dtypes[1],
                 "from its fp32 values: its optimizer took no step in its phase (every step so far was skipped), "
                 "so it holds no Adam state to carry over" if fresh else "through a universal checkpoint")
        if mixed:
            log.warning("checkpoint %s holds the weights that decay and those that do not in one optimizer group: "
                        "xpt-ds before 2026-12-02 applied no weight decay at ZeRO-3; optim.weight_decay applies "
                        "from this step on", tag)
    if fresh:
        return "values"
    make_universal(ckpt_root, tag, limit_minutes, stage)
    return "universal"


def never_stepped(tag_dir: Path, allow_pickle: bool = False) -> bool:
    """Whether the optimizer checkpoint ``tag_dir`` holds has no Adam state: no update yet in the checkpoint's
    phase (every step so far skipped: the non-finite losses a run halted on, fp16 overflows while the loss scale
    falls). Each phase builds its optimizer anew, so no earlier phase's state is lost. Read from rank 0's optimizer
    file (memory-mapped), where the torch optimizer's state dict has an empty ``state`` then. ``ds_to_universal``
    stops at such a ZeRO-3 checkpoint with KeyError 0; of a ZeRO-1/2 one it writes the fp32 values alone."""
    files = sorted(tag_dir.glob("*zero_pp_rank_0_mp_rank_00_optim_states.pt"))
    if not files:
        return False
    optim = load_plain(files[0], allow_pickle=allow_pickle, mmap=True)["optimizer_state_dict"]
    inner = optim.get("base_optimizer_state", optim.get("optimizer_state_dict"))
    if inner is None:
        return False
    state = inner if isinstance(inner, list) else inner["state"]  # a list: elastic_checkpoint's per-group states
    return not any(state.values() if isinstance(state, dict) else state)


def make_universal(ckpt_root: Path, tag: str, limit_minutes: float, stage: int) -> Path:
    """Convert ``tag`` to DeepSpeed's universal layout, once, and fit it for an engine at ZeRO ``stage`` (rank 0
    converts, every rank waits, at most ``limit_minutes``). Returns the folder ``engine.load_checkpoint`` takes as
    its tag."""
    out = ckpt_root / tag / "universal"

    def work() -> None:
        if not out.is_dir():
            _convert(out, limit_minutes)
        started = time.monotonic()
        if rewritten := fit_for(out, stage):
            log.info("rewrote the state files of %d parameters of %s as ZeRO-%s reads them, in %.1f s", rewritten,
                     out, "1/2" if stage < 3 else "3", time.monotonic() - started)

    rank0_alone(work, 60 * limit_minutes, CheckpointError)
    return out


def _convert(out: Path, limit_minutes: float) -> None:
    tmp = out.with_name("universal.tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # left by an interrupted conversion
    sizes = [p.stat().st_size for p in out.parent.glob("*optim_states.pt")]
    if free_bytes(out.parent) < sum(sizes):  # the copy holds every trained value and Adam moment again, and more
        raise disk_full(out, sum(sizes), before=True)
    workers = conversion_workers(sizes)
    log.info("converting checkpoint %s to a universal checkpoint (%.2f GB of optimizer state in %d files, %d worker "
             "process%s); the other ranks wait for it, at most %g minutes (checkpoint.rescale_timeout_minutes)",
             out.parent, sum(sizes) / 1e9, len(sizes), workers,
             "" if workers == 1 else "es", limit_minutes)
    cmd = [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", str(out.parent),
           "--output_folder", str(tmp), "--inject_missing_state",
           "--num_extract_workers", str(workers), "--num_merge_workers", str(workers)]
    started = time.monotonic()
    stopped = threading.Event()
    last, said = "no output", []  # said: its last lines, where a full disk shows
    # A session of its own: at the limit the whole group goes, ds_to_universal's worker processes with it. Tethered:
    # rank 0 interrupted (Ctrl-C, a signal) or killed, the conversion does not outlive it.
    with tethered(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        timer = threading.Timer(60 * limit_minutes, _stop, (proc.pid, stopped))
        timer.start()
        try:
            for line in proc.stdout:  # text mode: tqdm's carriage returns end lines too
                if line.strip():
                    last = line.strip()
                    said = [*said[-19:], last]
                    if last.startswith("***"):  # its stages: "*** 1. Extracting ZeRO fragments", ...
                        log.info("universal conversion: %s", last.strip("*. "))
            proc.wait()
        finally:
            timer.cancel()
    # ds_to_universal names its output folder in TAG/latest_universal, for a load without a tag: xpt-ds names it
    (out.parent / "latest_universal").unlink(missing_ok=True)
    if proc.returncode != 0:
        full = not stopped.is_set() and out_of_space(tmp, "\n".join(said))  # before its files are removed
        shutil.rmtree(tmp, ignore_errors=True)
        if full:  # torch.save's 'unexpected pos ...' did not say so
            raise disk_full(out, sum(sizes))
        if stopped.is_set():
            raise CheckpointError(f"converting checkpoint {out.parent} to a universal checkpoint did not finish "
                                  f"within {limit_minutes:g} minutes (checkpoint.rescale_timeout_minutes), and was "
                                  "stopped; raise it, or resume at the world size and ZeRO stage the checkpoint "
                                  "was saved at")
        raise CheckpointError(f"converting checkpoint {out.parent} to a universal checkpoint failed: {last}")
    os.replace(tmp, out)
    log.info("converted checkpoint %s to a universal checkpoint in %.1f s", out.parent, time.monotonic() - started)


def drop_converted(ckpt_root: Path) -> list[tuple[str, int]]:
    """Rank 0, after a complete save: delete the universal copies (``TAG/universal/``, and ``universal.tmp/`` of a
    conversion that was stopped) of every checkpoint but the newest. Such a copy is derived data that a resume at
    another scale makes again, and the run now has a newer checkpoint at its own scale. Returns (tag, bytes) per
    copy deleted. A tag that links to another run's checkpoint is left alone: the copy there is that run's."""
    dropped = []
    for tag in complete_tags(ckpt_root)[:-1]:
        if (ckpt_root / tag).is_symlink():
            continue
        # ds_to_universal's pointer to its output, which conversions before 2026-12-01 left
        (ckpt_root / tag / "latest_universal").unlink(missing_ok=True)
        for name in ("universal", "universal.tmp"):
            folder = ckpt_root / tag / name
            if folder.is_dir():
                size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
                shutil.rmtree(folder, ignore_errors=True)
                dropped.append((tag, size))
    return dropped


# The DeepSpeed modules whose code reads a universal checkpoint (0.19): the optimizer's global state (ZeRO-1/2's
# base optimizer, ZeRO-3), each parameter's state files (ZeRO-1/2: universal_checkpoint.load_hp_checkpoint_state,
# ZeRO-3: DeepSpeedZeroOptimizer_Stage3.load_hp_checkpoint_state).
LOADERS = ("deepspeed.runtime.base_optimizer", "deepspeed.runtime.zero.stage3",
           "deepspeed.checkpoint.universal_checkpoint")


class _MappedTorch:
    """``torch`` as the ``LOADERS`` see it during a load: its ``load`` is ``load_plain``, memory-mapped; with
    ``groups``, the optimizer's global state has at least that many param groups (``_padded``)."""

    def __init__(self, allow_pickle: bool, groups: int = 0):
        self.allow_pickle, self.groups = allow_pickle, groups

    def load(self, f, *args, **kwargs):  # DeepSpeed's call: torch.load(path, weights_only=False)
        return _padded(load_plain(f, allow_pickle=self.allow_pickle, mmap=True), self.groups)

    def __getattr__(self, name: str):
        return getattr(torch, name)


def _padded(optim_sd, groups: int):
    """ZeRO-1/2's universal load (DeepSpeed 0.19, ``base_optimizer.load_hp_checkpoint_state_from_checkpoint_dir``)
    pairs the engine's param groups with ``zero/optimizer_state.pt``'s ``param_groups`` by position (``zip``) and
    loads the states of each paired group's parameters by name: a checkpoint of fewer groups than this run builds
    (one group of weights that decay and weights that do not, ``migrate.regrouped``) left the later groups'
    parameters unloaded, training on whatever the empty engine held. The saved groups are followed by copies of
    the last one up to ``groups``; the settings a group takes from them are this run's again after the load
    (``store.load``)."""
    saved = optim_sd.get("param_groups") if isinstance(optim_sd, dict) else None
    if not isinstance(saved, list) or not saved or len(saved) >= groups:
        return optim_sd
    return {**optim_sd, "param_groups": saved + [dict(saved[-1]) for _ in range(groups - len(saved))]}


@contextlib.contextmanager
def mapped_universal_loads(allow_pickle: bool = False, groups: int = 0):
    """Around ``engine.load_checkpoint`` of a universal checkpoint: DeepSpeed's loaders ``torch.load`` every
    parameter's ``fp32``, ``exp_avg`` and ``exp_avg_sq`` file whole on every rank, then copy out the rank's slice
    (ZeRO-3: its 1/N of the flat values; ZeRO-1/2: the fragment its optimizer partition holds), so each rank read the
    whole copy. Memory-mapped, a rank reads the pages of its slice; the values are the same bits. The files are read
    as plain data (``load_plain``), also those the conversion wrote after the tag's files were checked, unless
    ``allow_pickle``. ``groups``: the engine's optimizer param groups, which ZeRO-1/2's loader reads as many of
    (``_padded``)."""
    import importlib
    modules = [importlib.import_module(name) for name in LOADERS]
    for module in modules:
        module.torch = _MappedTorch(allow_pickle, groups if module.__name__ == LOADERS[0] else 0)
    try:
        yield
    finally:
        for module in modules:
            module.torch = torch


def _stop(pid: int, stopped: threading.Event) -> None:
    stopped.set()
    kill_group(pid)


def conversion_workers(state_bytes: list[int], cpus: int | None = None, available: int | None = None) -> int:
    """How many extract and merge processes ``ds_to_universal`` gets: half the CPUs this process may run on, at
    most MAX_WORKERS, and no more than twice the largest optimizer file fits ``available`` times (MemAvailable):
    an extract process loads one rank's file whole."""
    cpus = cpus or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    workers = max(1, min(MAX_WORKERS, cpus // 2))
    available = psutil.virtual_memory().available if available is None else available
    if available and state_bytes and max(state_bytes):
        workers = max(1, min(workers, available // (2 * max(state_bytes))))
    return workers


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"
