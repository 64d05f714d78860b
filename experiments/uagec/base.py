"""The base config of ``launch/gpu_uagec.sh``'s sweeps for a number of steps per phase.

    python -m experiments.uagec.base STEPS PATH

Writes PATH: ``launch/configs/uagec_gpu.yaml`` with every phase STEPS long and its warm-up at most a tenth of that
(the rehearsal's phases are a few steps). The steps go into the base, not ``--set``, so that each method's schedule
is laid over their total (``xpt_ds.sweeps.plan.method_config``: TreLM's graph by its shares, one-phase methods both
phases' steps). The file stays the partial YAML it was: the plan tells a written key from a default.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from xpt_ds.config import ConfigError, TrainConfig, from_dict, read_config_file
from xpt_ds.errors import cli_errors
from xpt_ds.io.paths import write_text_atomic

CONFIG = Path(__file__).resolve().parents[2] / "launch" / "configs" / "uagec_gpu.yaml"


def base_config(steps: int, config: Path = CONFIG) -> dict:
    """``config`` as read, with every phase ``steps`` long and its warm-up at most ``steps // 10`` (at least 1).
    The file's keys and types are checked through the typed config first, so a bad key names itself here."""
    if steps <= 0:
        raise ConfigError(f"steps per phase must be positive, got {steps}")
    cfg = read_config_file(config)
    typed = from_dict(TrainConfig, cfg)
    for phase, checked in zip(cfg.get("phases") or [], typed.phases):
        phase["steps"] = steps
        phase["warmup_steps"] = min(checked.warmup_steps, max(1, steps // 10))
    return cfg


def write_base(steps: int, path: Path, config: Path = CONFIG) -> Path:
    """Written beside ``path`` and renamed over it: ``launch/gpu_uagec.sh`` starts its five sweeps at once, and each
    writes the same base for the same steps while the others may be reading it. Written in place, a reader could
    find it empty or cut short: the likely cause of the dry-run test's one failure (2026-12-06, under the full
    suite: "sweep_other_trelm: error: arm 'trelm' ..., size 600K: config key 'ph..."; it passed alone)."""
    write_text_atomic(path, yaml.safe_dump(base_config(steps, config), sort_keys=False))
    return path


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.uagec.base", description=__doc__.split("\n\n")[0])
    p.add_argument("steps", type=int, help="steps of every phase")
    p.add_argument("path", type=Path, help="the YAML file to write")
    p.add_argument("--config", type=Path, default=CONFIG, help="the study's config (default %(default)s)")
    a = p.parse_args(argv)
    write_base(a.steps, a.path, a.config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
