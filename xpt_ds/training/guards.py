"""Guards on a running job: non-finite steps are skipped and counted, and too many in a row halt the run after a
checkpoint; loss spikes get a warning; on a multi-rank run, a step far slower than usual gets a "slow step" line
naming the rank that waited longest for data (rate-limited: on one rank, or on a busy machine, such lines are
noise). Before training, the ranks check that every one built its data streams, that they skipped the same
corrupt shards and that every shard reads the same on each; before every save, that the weights are finite
(``weights_finite``).

DeepSpeed's ZeRO optimizers (stages 1-3, fp32 and bf16) already skip a step whose global gradient norm is NaN or
inf, which is also what a NaN loss produces, and count it in ``engine.skipped_steps``. The norm is global, so
every rank skips the same steps; reading the counter costs nothing. Stage 0 has no such check, and ZeRO 1-2
skip nothing for a bf16 model under ``bf16.check_grad_overflow: false`` (ds_configs/*_lean.json;
``engine.no_skip_reason``): there a non-finite loss shows at the next log step, and the run halts without saving.
"""
from __future__ import annotations

import hashlib
import statistics
from collections import deque
from dataclasses import dataclass

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.runtime.fp16.loss_scaler import MIN_LOSS_SCALE

from xpt_ds.data.shards import DataError, layout
from xpt_ds.errors import error_line
from xpt_ds.model import finite
from xpt_ds.runtime.distributed import collective_timeout

HALTED_EXIT_CODE = 3  # not 124: a halted job must not be requeued


def _token_streams(stream) -> list:
    """The token streams a batch stream reads: its own, or with data.mix every corpus's."""
    mixture = getattr(stream, "mixture", None)
    return list(mixture.streams) if mixture is not None else [stream.stream]


def skipped_shards(train) -> list[str]:
    """The corrupt shards left out (data.on_corrupt_shard: skip) of the training stream: target MLM (with
    data.mix, every corpus's), TreLM's English MLM and its parallel shards."""
    source, corpus = getattr(train, "source", None), getattr(train, "corpus", None)
    return ([path for s in _token_streams(getattr(train, "mlm", train)) for path in s.skipped]
            + (list(source.stream.skipped) if source is not None else [])
            + (list(corpus.skipped) if corpus is not None else []))


def shard_layouts(*streams) -> dict[str, tuple[int, int, str]]:
    """Shard path -> ``shards.layout`` of every shard the streams (None: none) read."""
    out = {}
    for stream in filter(None, streams):
        for mlm in filter(None, (getattr(stream, "mlm", stream), getattr(stream, "source", None))):
            out.update((idx.path, layout(idx)) for tokens in _token_streams(mlm) for idx in tokens.indexes)
        if (corpus := getattr(stream, "corpus", None)) is not None:
            out.update((p.src.path, layout(p.src, p.tgt, p.t2s, p.s2t)) for p in corpus.shards)
    return out


def check_streams_agree(problem: Exception | None, skipped: list[str],
                        layouts: dict[str, tuple[int, int, str]] | None = None) -> None:
    """Every rank builds its data streams and scans the shards itself; the same bytes give the same verdict, but
    a file that differs between nodes or a read error on one rank would fail that rank alone (``problem``, while
    the others went on into the next collective, to fail there with a traceback or wait until its timeout) or
    give the ranks different corpora, hence different data layouts and positions: a node whose copy of the corpus
    differs (another version, no manifest record to check it against) would read other documents at the same
    positions, unnoticed. One all_gather of each rank's problem, skipped names and a digest of its ``layouts``
    (``shard_layouts``), and a second of the layouts themselves only where the digests differ (a job's ranks each
    receive every rank's: kilobytes per rank, not the layouts of thousands of shards): a problem on any rank, or a
    difference, stops every rank with one line."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    if world == 1:
        if problem is not None:
            raise problem
        return
    layouts = layouts or {}
    digest = hashlib.sha256(repr(sorted(layouts.items())).encode()).hexdigest()
    every = [None] * world
    dist.all_gather_object(every, (None if problem is None else error_line(problem), sorted(skipped), digest))
    failed = [r for r, (line, _, _) in enumerate(every) if line is not None]
    if problem is not None:
        raise problem
    if failed:
        raise DataError(f"rank {failed[0]} could not build its data streams: {every[failed[0]][0]}")
    differ = [r for r, (_, names, _) in enumerate(every) if names != every[0][1]]
    if differ:
        r = differ[0]
        raise DataError(f"ranks skipped different corrupt shards: rank 0 skipped {every[0][1] or 'none'}, rank {r} "
                        f"skipped {every[r][1] or 'none'}; the shards must read the same on every rank")
    if all(d == digest for _, _, d in every):
        return
    dist.all_gather_object(every, layouts)  # every rank is here: each saw the same digests
    first = every[0]
    for r, theirs in enumerate(every):
        path = next((p for p in sorted(first.keys() | theirs.keys()) if first.get(p) != theirs.get(p)), None)
        if path is not None:
            (d0, t0, _), (d, t, _) = first.get(path, (0, 0, "")), theirs.get(path, (0, 0, ""))
            raise DataError(f"shard {path} reads differently on rank {r} ({d} documents, {t} tokens) than on rank 0 "
                            f"({d0} documents, {t0} tokens): every rank must read the same files (does a node hold "
                            "another copy of the corpus?)")


class Halted(Exception):
    """A guard stopped the run; the message says why and which checkpoint to look at."""


class RankExchange:
    """One small all_gather per step over a gloo group on the host: no device synchronisation. The group has the
    job's collective timeout (``guard.collective_timeout_s``): without one, torch gives a gloo group 30 minutes."""

    def __init__(self):
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.group = dist.new_group(backend="gloo", timeout=collective_timeout()) if self.world > 1 else None

    def gather(self, values: list[float]) -> torch.Tensor:
        """Every rank's ``values``, as a [world, len(values)] tensor on every rank (collective)."""
        row = torch.tensor(values, dtype=torch.float64)
        if self.group is None:
            return row[None]
        rows = [torch.empty_like(row) for _ in range(self.world)]
        dist.all_gather(rows, row, group=self.group)
        return torch.stack(rows)


@dataclass
class BadStepCounter:
    """Skipped (non-finite) steps: in total and in a row. Part of the trainer's checkpointed state."""
    limit: int
    total: int = 0
    in_a_row: int = 0

    def update(self, skipped: bool) -> bool:
        """Record one step; True when more than ``limit`` steps in a row were skipped."""
        self.total += skipped
        self.in_a_row = self.in_a_row + 1 if skipped else 0
        return self.in_a_row > self.limit

    def state_dict(self) -> dict:
        return {"total": self.total, "in_a_row": self.in_a_row}

    def load_state_dict(self, sd: dict) -> None:
        self.total, self.in_a_row = sd["total"], sd["in_a_row"]


class SpikeDetector:
    """``value`` far above the median of a recent window; the window starts over on a resume. Checks start
    once ``min_history`` values are in (default: a fifth of the window, at least 5)."""

    def __init__(self, ratio: float, window: int, min_history: int | None = None):
        self.ratio = ratio
        self.min_history = min(window, max(5, window // 5)) if min_history is None else min_history
        self.history: deque[float] = deque(maxlen=window)
        self.counted = 0  # how many values the last check's median was taken over

    def check(self, value: float) -> float | None:
        """The median ``value`` exceeds by more than ``ratio`` times, else None; then remembers ``value``."""
        self.counted = len(self.history)
        median = statistics.median(self.history) if self.counted >= self.min_history else None
        self.history.append(value)
        if self.ratio and median and value > self.ratio * median:
            return median
        return None


class SlowSteps:
    """Steps that take ``ratio`` x the median of the last ``window`` (the slowest rank's time), reported at most
    once per ``window`` steps with the number left unreported. Off on one rank (``world`` 1): the line exists
    to find a rank that holds the others back."""

    def __init__(self, ratio: float, window: int, world: int):
        self.detector = SpikeDetector(ratio if world > 1 else 0.0, window)
        self.window = window
        self.last_reported: int | None = None
        self.unreported = 0

    def check(self, step: int, rows: torch.Tensor) -> str | None:
        """rows: per rank (step seconds, data-wait seconds). The line to log for this step, or None."""
        median = self.detector.check(rows[:, 0].max().item())
        if median is None:
            return None
        if self.last_reported is not None and step - self.last_reported < self.window:
            self.unreported += 1
            return None
        line = slow_step_line(step, rows, median, self.unreported)
        self.last_reported, self.unreported = step, 0
        return line


def slow_step_line(step: int, rows: torch.Tensor, median: float, unreported: int = 0) -> str:
    """rows: per rank (step seconds, data-wait seconds)."""
    took, waits = rows[:, 0].max().item(), rows[:, 1]
    slow = int(waits.argmax())
    more = f" ({unreported} more slow step(s) since the last report)" if unreported else ""
    return (f"slow step: step {step} took {took:.2f} s, {took / median:.1f}x the median {median:.2f} s; "
            f"longest data wait {waits[slow].item():.2f} s on rank {slow}{more}")


def weights_finite(engine, optimizer, device: torch.device) -> bool:
    """Every rank's parameters (its ZeRO-3 partition, else the whole module) and fp32 masters are finite, once per
    save (the trainer checks before it writes a checkpoint): one reduction per tensor, its sum
    (``xpt_ds.model.finite``), and one all-reduce. Only where some sum is not finite, on any rank, does every rank
    count its suspect tensors' non-finite values, with a second all-reduce."""
    tensors = [p.ds_tensor if hasattr(p, "ds_tensor") else p for p in engine.module.parameters()]
    tensors += list(getattr(optimizer, "single_partition_of_fp32_groups", None) or [])  # ZeRO 1/2 masters
    flags = finite.suspects(tensors, device)
    suspect = flags.sum()
    deepspeed.comm.all_reduce(suspect)
    if suspect.item() == 0:
        return True
    bad = finite.count_nonfinite([t for t, f in zip(tensors, flags.tolist()) if f], device)
    deepspeed.comm.all_reduce(bad)
    return bad.item() == 0


def scale_overflow(engine, scale: float | None, loss: torch.Tensor) -> bool:
    """Whether a step DeepSpeed skipped was fp16 loss scaling finding its scale: a finite loss whose scaled
    gradients overflowed at ``scale`` (``engine.loss_scale`` before the step), above the minimum scale. DeepSpeed then
    lowers the scale; at the first steps (an initial scale of 2^16 or 2^32) several in a row are normal, and not
    bad steps. A non-finite loss on any rank, or an overflow at the minimum scale, is one: the verdict is every
    rank's, as the skip is, so that every rank counts the same bad steps and halts at the same step. Reads the
    loss (a host sync, and for several ranks a one-number all-reduce) only for a skipped step of such an engine."""
    if scale is None:
        return False
    args = engine.dynamic_loss_scale_args() or {}
    if scale <= float(args.get(MIN_LOSS_SCALE, 1)):
        return False
    finite = torch.isfinite(loss).to(torch.float32).reshape(1)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(finite, op=dist.ReduceOp.MIN)
    return bool(finite.item())


class StepGuards:
    """The per-step checks and their state, one component: skipped (non-finite) steps, loss spikes, slow ranks, the
    per-step host exchange, and the steps whose loss a test poisons (``guard.inject_nan_steps``, rank 0).
    ``unskipped``: why a non-finite step can reach the weights (``engine.no_skip_reason``), for the halt lines."""

    def __init__(self, g, rank: int, world: int, unskipped: str):
        self.exchange = RankExchange()
        self.bad_steps = BadStepCounter(g.max_bad_steps)
        self.loss_spikes = SpikeDetector(g.loss_spike_ratio, g.loss_spike_window)
        self.slow_steps = SlowSteps(g.slow_step_ratio, g.slow_step_window, world)
        self.inject_nan = set(g.inject_nan_steps) if rank == 0 else set()
        self.unskipped = unskipped

    def count_bad_step(self, skipped: bool, step: int, overflow_scale: float | None = None) -> tuple[bool, str | None]:
        """Count a skipped step: (whether too many came in a row, the same on every rank since the norm is global;
        the log line of a skipped one). ``overflow_scale``: the step was fp16 loss scaling's overflow at that scale
        (``scale_overflow``), which is logged but neither counts nor ends a run of bad steps."""
        if overflow_scale is not None:
            return False, (f"step {step}: fp16 gradients overflowed at loss scale {overflow_scale:.10g}; update "
                           "skipped, as dynamic loss scaling does")
        halt = self.bad_steps.update(skipped)
        line = (f"step {step}: loss or gradient norm not finite, update skipped ({self.bad_steps.in_a_row} in a row, "
                f"{self.bad_steps.total} in all)") if skipped else None
        return halt, line
