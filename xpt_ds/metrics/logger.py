"""Throughput, MFU, TensorBoard scalars and the rank-0 progress bar."""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from xpt_ds.config import H100_PEAK_TFLOPS


def matmul_params(hf_config, mask_prob: float) -> float:
    """Weights that take part in a matmul per token: encoder layers, head transform, and the tied decoder
    on the masked fraction only (the LM head runs on masked positions)."""
    d, ff, L, V = hf_config.hidden_size, hf_config.intermediate_size, hf_config.num_hidden_layers, hf_config.vocab_size
    return L * (4 * d * d + 2 * d * ff) + d * d + mask_prob * V * d


def flops_per_token(hf_config, seq_len: int, mask_prob: float) -> float:
    """6·N_matmul + 12·L·d·T (PaLM appendix B convention, as the issue asks)."""
    L, d = hf_config.num_hidden_layers, hf_config.hidden_size
    return 6 * matmul_params(hf_config, mask_prob) + 12 * L * d * seq_len


def peak_flops(configured_tflops: float) -> float | None:
    if configured_tflops > 0:
        return configured_tflops * 1e12
    return H100_PEAK_TFLOPS * 1e12 if torch.cuda.is_available() else None


class LogWindow:
    """What the trainer accumulates between two log steps. The loss sum stays on the device, so a step costs no
    host sync; ``good`` counts the steps whose loss is in it (a skipped step's loss is not finite)."""

    def __init__(self, device: torch.device):
        self.loss_sum = torch.zeros((), device=device)
        self.reset()

    def reset(self) -> None:
        self.loss_sum.zero_()
        self.steps = self.good = 0
        self.started = time.perf_counter()

    def add(self, loss: torch.Tensor, skipped: bool) -> None:
        self.steps += 1
        if not skipped:
            self.loss_sum += loss
            self.good += 1

    def mean_loss(self) -> torch.Tensor:
        return self.loss_sum / max(self.good, 1)

    def seconds(self) -> float:
        return time.perf_counter() - self.started


class MetricsLogger:
    """Rank 0 only: TensorBoard, a JSON-lines log and a tqdm bar. Other ranks get a no-op instance. Files are
    opened and the bar shown by ``start`` (after a resume, at the step the run continues from)."""

    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool, progress: bool, total_steps: int):
        self.run_dir, self.enabled, self.total_steps = run_dir, enabled, total_steps
        self.tensorboard, self.progress = tensorboard, progress
        self.writer = self.bar = self.jsonl = None

    def start(self, initial_step: int) -> None:
        if not self.enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = open(self.run_dir / "metrics.jsonl", "a")
        if self.tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(str(self.run_dir / "tb"))
        if self.progress:
            from tqdm import tqdm
            self.bar = tqdm(total=self.total_steps, initial=initial_step, dynamic_ncols=True, desc="train")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        if self.jsonl is None:
            return
        for k, v in scalars.items():
            if self.writer is not None and v is not None:
                self.writer.add_scalar(k, v, step)
        self.jsonl.write(json.dumps({"step": step, "time": time.time(), **scalars}) + "\n")
        self.jsonl.flush()
        if self.bar is not None:
            short = {k.split("/")[-1]: v for k, v in scalars.items() if k.startswith("train/") and v is not None}
            self.bar.set_postfix({k: f"{v:.4g}" for k, v in short.items() if k in ("loss", "lr", "tokens_per_s")})

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            self.writer.close()
        if self.jsonl is not None:
            self.jsonl.close()
        self.writer = self.bar = self.jsonl = None
