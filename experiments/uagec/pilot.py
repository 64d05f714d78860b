"""The steps per phase of ``launch/gpu_uagec.sh``'s sweeps, and ``OUT/pilot.json``, the rule that chose them.

    python -m experiments.uagec.pilot --work DIR --pilot-steps N [--phase-steps N] --train-seconds S

Without a pilot (``--pilot-steps 0``): a cap of ``--phase-steps`` per phase (default the study config's first
phase's steps), every phase ending early on its validation loss and every run scored from its best checkpoint.
With one (DIR/pilot/results.jsonl: Scratch and XPT at the largest size, capped at N steps per phase): 1.25 times
the later of their best-checkpoint steps, rounded up to 100, halved per phase (one-phase methods get both
phases'), at most N. Prints the steps per phase, the one line the script reads.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from xpt_ds.config import TrainConfig, from_dict, read_config_file
from xpt_ds.errors import cli_errors

from experiments.uagec.base import CONFIG

NO_PILOT_RULE = ("no pilot: a cap of PHASE_STEPS per phase (default uagec_gpu.yaml's); each phase ends early when "
                 "guard.early_stop_patience validations in a row do not lower valid/loss, and every run is scored "
                 "from its best checkpoint (one-phase methods: both phases' steps)")
PILOT_RULE = ("sweep steps per phase = ceil(1.25 x the later best step / 100) x 100 / 2 (one-phase methods: both)")


def steps_from_pilot(best: dict[str, int], cap: int) -> int:
    """The sweeps' steps per phase from the pilot's best-checkpoint steps (method -> step), at most ``cap``; a
    pilot with no best checkpoint counts as best at the end of both phases (2 x cap). The unit is 100 steps, or
    1 when the later best step is under 100 (the rehearsal's pilot runs a few steps)."""
    later = max(best.values()) if best else 2 * cap
    unit = 100 if later >= 100 else 1
    return min(cap, max(1, math.ceil(1.25 * later / unit) * unit // 2))


def pilot_rows(path: Path) -> list[dict]:
    """Every row of the pilot's results.jsonl, in file order (a rerun's newer row of a method comes later and wins
    in the dicts below)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pilot_record(work: Path, cap: int, fixed: int | None, train_seconds: int, config: Path = CONFIG) -> dict:
    """What ``pilot.json`` records: the steps per phase (``sweep_steps_per_phase``) and the rule and figures that
    gave them."""
    if cap <= 0:
        per_phase = fixed if fixed is not None else from_dict(TrainConfig, read_config_file(config)).phases[0].steps
        record = {"pilot_steps_per_phase": 0, "sweep_steps_per_phase": per_phase, "rule": NO_PILOT_RULE}
    else:
        rows = pilot_rows(work / "pilot" / "results.jsonl")
        best = {r["method"]: r["best"]["step"] for r in rows if r.get("best")}
        record = {"pilot_steps_per_phase": cap, "best_step": best,
                  "steps_done": {r["method"]: r.get("steps_done") for r in rows},
                  "train_seconds": {r["method"]: r["train_seconds"] for r in rows},
                  "rule": PILOT_RULE, "sweep_steps_per_phase": steps_from_pilot(best, cap)}
    record["train_seconds_budget"] = train_seconds  # guard.max_train_minutes x 60 of every run; 0 = none
    return record


def write_pilot(work: Path, cap: int, fixed: int | None, train_seconds: int, config: Path = CONFIG) -> int:
    """Write ``work/pilot.json``; the steps per phase."""
    record = pilot_record(work, cap, fixed, train_seconds, config)
    (work / "pilot.json").write_text(json.dumps(record, indent=1) + "\n")
    return record["sweep_steps_per_phase"]


def _optional_int(text: str) -> int | None:
    return int(text) if text else None  # the script passes "" for an unset PHASE_STEPS


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.uagec.pilot", description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="the script's WORK (pilot/results.jsonl; pilot.json)")
    p.add_argument("--pilot-steps", type=int, required=True, help="PILOT_STEPS: the pilot's cap per phase, 0 = none")
    p.add_argument("--phase-steps", type=_optional_int, default=None, help="PHASE_STEPS: the cap without a pilot")
    p.add_argument("--train-seconds", type=int, required=True, help="TRAIN_S, recorded (0 = no time budget)")
    p.add_argument("--config", type=Path, default=CONFIG, help="the study's config (default %(default)s)")
    a = p.parse_args(argv)
    print(write_pilot(a.work, a.pilot_steps, a.phase_steps, a.train_seconds, a.config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
