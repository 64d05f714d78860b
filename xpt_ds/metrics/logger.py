"""Throughput, MFU, TensorBoard scalars and the rank-0 progress: a bar on a terminal, a line per log step
otherwise."""
from __future__ import annotations

import contextlib
import importlib
import json
import logging
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from xpt_ds.config import H100_PEAK_TFLOPS
from xpt_ds.errors import first_line
from xpt_ds.io.paths import unwritable, write_error, write_text_atomic
from xpt_ds.metrics.memory import memory_scalars

log = logging.getLogger(__name__)
BAR_KEYS = ("loss", "lr", "tokens_per_s", "host_rss_gib", "gpu_peak_allocated_gib")  # what the bar's postfix shows


def matmul_params(hf_config, mask_prob: float) -> float:
    """Weights that take part in a matmul per token: encoder layers, head transform, and the tied decoder
    on the masked fraction only (the LM head runs on masked positions); a causal LM passes mask_prob 1."""
    d, L, V = hf_config.hidden_size, hf_config.num_hidden_layers, hf_config.vocab_size
    ff = getattr(hf_config, "intermediate_size", None) or getattr(hf_config, "n_inner", None) or 4 * d  # GPT-2
    if hasattr(hf_config, "num_key_value_heads"):  # Llama family: grouped K/V, gated MLP, no head transform
        q, kv = attention_width(hf_config), hf_config.num_key_value_heads * _head_dim(hf_config)
        return L * (2 * d * q + 2 * d * kv + 3 * d * ff) + mask_prob * V * d
    head = 0 if hf_config.model_type == "gpt2" else d * d  # the MLM head transform; GPT-2 has none
    return L * (4 * d * d + 2 * d * ff) + head + mask_prob * V * d


def _head_dim(hf_config) -> int:
    return getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads


def attention_width(hf_config) -> int:
    """Heads × head size: the queries' width, which is the hidden size except where a config sets ``head_dim``
    apart from it (Gemma: 8 heads of 256 in a 2,304-wide Gemma-2-2B)."""
    if not hasattr(hf_config, "num_key_value_heads"):
        return hf_config.hidden_size
    return hf_config.num_attention_heads * _head_dim(hf_config)


def flops_per_token(hf_config, seq_len: int, mask_prob: float) -> float:
    """6·N_matmul + 12·L·d_attn·T (PaLM appendix B convention, as the issue asks; d_attn, ``attention_width``,
    is the hidden size but for Gemma's wider or narrower heads)."""
    attention = 12 * hf_config.num_hidden_layers * attention_width(hf_config) * seq_len
    return 6 * matmul_params(hf_config, mask_prob) + attention


def rows_flops(hf_config, lengths_in, lengths_out, layers_in: int, layers_out: int,
               predicted: dict[int, float]) -> float:
    """Model FLOPs of rows of real lengths (padding not counted), in ``flops_per_token``'s convention: per layer,
    6 per weight per token plus 12·d·T per token of a row of T tokens; ``layers_in`` layers run on the rows'
    input lengths, ``layers_out`` on their output lengths (TreLM: the lower half, then the TRILayer and the upper
    half on the reordered output); the head transform on every output token; the decoder on the predicted
    positions, ``predicted`` = {head vocabulary size: predictions}. For one row of T tokens in and out with
    mask_prob·T predicted this is ``flops_per_token(.., T, mask_prob) * T``."""
    d, ff = hf_config.hidden_size, hf_config.intermediate_size
    n_in, n_out = np.asarray(lengths_in, np.float64), np.asarray(lengths_out, np.float64)
    per_layer = 6 * (4 * d * d + 2 * d * ff)
    layers = (layers_in * (per_layer * n_in.sum() + 12 * d * (n_in ** 2).sum())
              + layers_out * (per_layer * n_out.sum() + 12 * d * (n_out ** 2).sum()))
    return float(layers + 6 * d * d * n_out.sum() + 6 * d * sum(v * n for v, n in predicted.items()))


def peak_flops(configured_tflops: float) -> float | None:
    if configured_tflops > 0:
        return configured_tflops * 1e12
    return H100_PEAK_TFLOPS * 1e12 if torch.cuda.is_available() else None


class LogWindow:
    """What the trainer accumulates between two log steps. The loss sum stays on the device, so a step costs no
    host sync; ``good`` counts the steps whose loss is in it (a skipped step's loss is not finite). ``steps``
    counts every step not logged yet, ``timed`` those this process ran (the window's seconds, tokens and FLOPs):
    a checkpoint written mid-window carries the loss part (``state_dict``), so the first loss logged after a
    resume averages the same steps as the uninterrupted run's. ``paused``: the window's seconds spent in
    validation passes, checkpoint saves and phase hand-overs (``pause``), which its throughput leaves out."""

    def __init__(self, device: torch.device):
        self.loss_sum = torch.zeros((), device=device)
        self.reset()

    def reset(self) -> None:
        self.loss_sum.zero_()
        self.steps = self.good = self.timed = 0
        self.tokens, self.flops = 0, 0.0  # every rank's, of every row the window's steps trained on
        self.started = time.perf_counter()
        self.paused = 0.0

    def add(self, loss: torch.Tensor, skipped: bool, tokens: int = 0, flops: float = 0.0) -> None:
        self.steps += 1
        self.timed += 1
        self.tokens += tokens
        self.flops += flops
        if not skipped:
            self.loss_sum += loss
            self.good += 1

    def mean_loss(self) -> torch.Tensor:
        return self.loss_sum / max(self.good, 1)

    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def training_seconds(self) -> float:
        """The window's seconds less its pauses: what its tokens/s and MFU divide by, so that a validation pass,
        a checkpoint or a phase hand-over does not show as a dip in throughput (the ETA counts them)."""
        return max(self.seconds() - self.paused, 1e-9)

    @contextlib.contextmanager
    def pause(self):
        """Work between steps that is not training; what of it falls in this window (one that ``reset`` began
        meanwhile counts only its own part) is ``paused``."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.paused += time.perf_counter() - max(began, self.started)

    def state_dict(self, rank_sums: list[float]) -> dict:
        """The steps not logged yet, with every rank's loss sum (``rank_sums``, gathered by the caller: the sum
        is this rank's share of a mean that the log step all-reduces)."""
        return {"steps": self.steps, "good": self.good, "loss_sums": rank_sums}

    def load_state_dict(self, sd: dict, rank: int, world: int) -> None:
        """Continue a window a checkpoint carries. On the world size it was written with, each rank takes its own
        sum back (the logged mean is then the uninterrupted run's, bit for bit); on another, each takes the old
        ranks' mean, which the log step's all-reduce and division by the new world size turn into the same mean
        of the restored steps' losses."""
        sums = sd["loss_sums"]
        self.reset()
        self.steps, self.good = sd["steps"], sd["good"]
        self.loss_sum.fill_(sums[rank] if len(sums) == world else sum(sums) / len(sums))


def logging_problem(run_dir: Path, tensorboard: bool) -> str | None:
    """Why rank 0 could not write TensorBoard's events (``logging.tensorboard``), or None: checked before the
    model is built, not when the logs open after it (a missing tensorboard package, a ``tb`` that is a file: one
    line now, not a traceback after minutes of building and loading)."""
    if not tensorboard:
        return None
    try:
        importlib.import_module("torch.utils.tensorboard")
    except ImportError as e:
        return (f"config key 'logging.tensorboard' is true, but TensorBoard cannot be imported ({first_line(e)}): "
                "install tensorboard, or set --logging.tensorboard=false")
    why = unwritable(run_dir / "tb")
    if why is not None:
        return (f"config key 'logging.tensorboard': cannot write TensorBoard's events in {run_dir / 'tb'}: {why} "
                "(or set --logging.tensorboard=false)")
    return None


def quiet_tensorboard_thread() -> None:
    """Keep TensorBoard's writer thread from printing a traceback when a write fails (a full disk): the thread
    stores its error and re-raises it, so Python prints it, and the logging thread gets the same error at its next
    write, which ``MetricsLogger.log`` raises naming ``RUN_DIR/tb``. Other threads' errors print as before."""
    previous = threading.excepthook
    if getattr(previous, "xpt_ds_quiet_tensorboard", False):
        return

    def hook(args) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread" and issubclass(args.exc_type, OSError):
            return
        previous(args)
    hook.xpt_ds_quiet_tensorboard = True
    threading.excepthook = hook


class MetricsLogger:
    """Rank 0 only: TensorBoard, a JSON-lines log and the progress. Other ranks get a no-op instance. Files are
    opened and the bar shown by ``start`` (after a resume, at the step the run continues from). The bar is drawn
    only when ``progress`` is on and ``stream`` (stderr) is a terminal: in a log file its carriage-return updates
    would glue the next log line onto its row, so each log step logs a ``progress_line`` there instead (and with
    the bar off)."""

    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool, progress: bool, stream=None):
        self.run_dir, self.enabled = run_dir, enabled
        self.tensorboard, self.progress, self.stream = tensorboard, progress, stream
        self.writer = self.bar = self.jsonl = None

    def start(self, initial_step: int, total_steps: int) -> None:
        """Open the logs at ``initial_step`` (0, or the step of the checkpoint a resume starts from). What an earlier
        attempt logged after that step is trained again, or left on an abandoned branch: its metrics.jsonl rows move
        to metrics.superseded.jsonl, and TensorBoard hides its events from that step on (``purge_step``), so no step
        is logged twice."""
        if not self.enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._supersede_after(initial_step)
        self.jsonl = open(self.run_dir / "metrics.jsonl", "a")
        if self.tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            quiet_tensorboard_thread()
            self.writer = SummaryWriter(str(self.run_dir / "tb"), purge_step=initial_step + 1)
        stream = sys.stderr if self.stream is None else self.stream
        if self.progress and stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total_steps, initial=initial_step, dynamic_ncols=True, desc="train", file=stream)

    def _supersede_after(self, step: int) -> None:
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return
        kept, later = [], []
        for line in path.read_bytes().splitlines(keepends=True):
            line = line if line.endswith(b"\n") else line + b"\n"
            try:
                row_step = json.loads(line)["step"]
            except (ValueError, KeyError, TypeError):  # not a row (a line cut by a crash mid-write, bytes that are
                later.append(line)  # not UTF-8): set aside with the superseded rows, neither dropped nor a
                continue  # traceback that stops every resume
            (later if row_step > step else kept).append(line)
        if not later:
            return
        with open(self.run_dir / "metrics.superseded.jsonl", "ab") as f:
            f.writelines(later)
        write_text_atomic(path, b"".join(kept).decode("utf-8"))

    def log(self, step: int, scalars: dict[str, float]) -> None:
        if self.jsonl is None:
            return
        try:
            for k, v in scalars.items():
                if self.writer is not None and v is not None:
                    self.writer.add_scalar(k, v, step)
        except OSError as e:  # a full disk: write() names no file
            raise write_error(e, self.run_dir / "tb") or e
        try:
            self.jsonl.write(json.dumps({"step": step, "time": time.time(), **scalars}) + "\n")
            self.jsonl.flush()
        except OSError as e:
            raise write_error(e, self.run_dir / "metrics.jsonl") or e
        if self.bar is not None:
            short = {k.split("/")[-1]: v for k, v in scalars.items() if k.startswith(("train/", "mem/"))
                     and v is not None}
            self.bar.set_postfix({k: f"{short[k]:.4g}" for k in BAR_KEYS if k in short})

    def log_step(self, step: int, total_steps: int, scalars: dict[str, float], step_seconds: float,
                 device: torch.device) -> None:
        """A training log step: ``scalars`` and this process's memory (``xpt_ds.metrics.memory``) into the logs,
        and without a bar the progress line, its ETA from the window's ``step_seconds``."""
        if not self.enabled:
            return
        scalars = {**scalars, **memory_scalars(device)}
        self.log(step, scalars)
        if self.bar is None:
            log.info(progress_line(step, total_steps, scalars, (total_steps - step) * step_seconds))

    def set_total(self, total_steps: int) -> None:
        """The bar's end, when it moves (early stopping ends a phase before its planned steps)."""
        if self.bar is not None and self.bar.total != total_steps:
            self.bar.total = total_steps
            self.bar.refresh()

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        """Close the logs; a TensorBoard write that failed (a full disk), now or in its thread earlier, is an
        OSError naming ``RUN_DIR/tb`` (metrics.jsonl is closed whatever happens)."""
        bar, writer, jsonl = self.bar, self.writer, self.jsonl
        self.writer = self.bar = self.jsonl = None
        try:
            if bar is not None:
                bar.close()
            if writer is not None:
                writer.close()
        except OSError as e:
            raise write_error(e, self.run_dir / "tb") or e
        finally:
            if jsonl is not None:
                jsonl.close()


def _duration(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def progress_line(step: int, total_steps: int, scalars: dict[str, float], eta_s: float) -> str:
    """A log step's line where no bar is drawn: step/total, loss, lr, throughput, ETA and memory."""
    get = scalars.get
    loss = get("train/loss")
    parts = [f"step {step}/{total_steps}: loss " + ("n/a (every step skipped)" if loss is None else f"{loss:.4f}"),
             f"lr {get('train/lr'):.3g}", f"{get('train/tokens_per_s'):.4g} tokens/s"]
    if get("train/mfu") is not None:
        parts.append(f"MFU {100 * get('train/mfu'):.1f}%")
    parts.append(f"ETA {_duration(eta_s)}")
    memory = []
    if get("mem/host_rss_gib") is not None:
        memory.append(f"host RSS {get('mem/host_rss_gib'):.2f} GiB")
    if get("mem/host_peak_rss_gib") is not None:
        memory.append(f"host peak {get('mem/host_peak_rss_gib'):.2f} GiB")
    if get("mem/gpu_peak_allocated_gib") is not None:
        memory.append(f"GPU peak {get('mem/gpu_peak_allocated_gib'):.2f} GiB allocated, "
                      f"{get('mem/gpu_peak_reserved_gib'):.2f} reserved")
    return ", ".join(parts) + ("; " + ", ".join(memory) if memory else "")
