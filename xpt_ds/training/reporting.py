"""What the run reports as it goes, one component: each log step's scalars with the window's throughput
(TensorBoard, metrics.jsonl and the progress line: ``MetricsLogger``) and rank 0's status.json with its ETA
(``StatusFile``, with a heartbeat)."""
from __future__ import annotations

import torch

from xpt_ds.metrics.logger import LogWindow, MetricsLogger
from xpt_ds.runtime.status import StatusFile


class Reporter:
    def __init__(self, logger: MetricsLogger, status: StatusFile | None, world: int, device: torch.device,
                 peak: float | None):
        self.logger, self.status, self.world, self.device, self.peak = logger, status, world, device, peak
        self.step_seconds: float | None = None  # mean of the last log window, for the ETA
        self.tokens_per_s: float | None = None

    def log_step(self, step: int, total_steps: int, window: LogWindow, scalars: dict) -> None:
        """``scalars``, whose ``train/tokens_per_s`` and ``train/mfu`` this fills from ``window`` (the steps since
        the last log step, every rank's rows, over the seconds they trained: ``LogWindow.training_seconds``)."""
        seconds = window.training_seconds()  # less validation, checkpoints and hand-overs
        self.tokens_per_s = window.tokens / seconds
        self.step_seconds = window.seconds() / max(window.timed, 1)  # the ETA's: those included
        scalars.update({"train/tokens_per_s": self.tokens_per_s, "train/mfu": None if self.peak is None else
                        window.flops / seconds / (self.peak * self.world)})
        self.logger.log_step(step, total_steps, scalars, self.step_seconds, self.device)

    def write_status(self, state: str, s, phase: str, total_steps: int, skipped_steps: int, last_saved: str | None,
                     **fields) -> None:
        """status.json (rank 0): ``state``, where the run is (``s``: TrainerState), the ETA, and ``fields``."""
        if self.status is None:
            return
        total = s.global_step if state == "finished" else total_steps
        eta = (total - s.global_step) * self.step_seconds if self.step_seconds is not None else None
        self.status.write(state=state, phase=phase, phase_index=s.phase_index, phase_step=s.phase_step,
                          global_step=s.global_step, total_steps=total, tokens_seen=s.tokens_seen,
                          target_tokens_seen=s.target_tokens_seen, skipped_steps=skipped_steps,
                          last_complete_checkpoint=last_saved, tokens_per_s=self.tokens_per_s, eta_s=eta, **fields)

    def close(self) -> None:
        self.logger.close()
        if self.status is not None:
            self.status.close()
