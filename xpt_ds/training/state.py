"""The training loop's own counters: where the run is (phase, steps, tokens, seconds) and which phase ends it kept.
Every checkpoint carries them (``state_dict``), and a resume restores them from its client state."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from xpt_ds.checkpoint.tags import CheckpointError


@dataclass
class TrainerState:
    phase_index: int = 0
    phase_step: int = 0  # optimizer steps done in the current phase, skipped ones too: the phase's length
    phase_updates: int = 0  # of those, the ones that updated the weights: the LR schedule's step (as DeepSpeed's)
    global_step: int = 0
    tokens_seen: int = 0  # every rank's tokens of every row trained on (TreLM: MLM, English MLM and CdLM rows)
    target_tokens_seen: int = 0  # of target MLM rows only: data.train_shards' epochs (the sweep)
    phase_ends: dict[str, str] = field(default_factory=dict)  # kept phase end (start_from/merge) -> its blake2b
    # the global step of the last validation pass (-1: none yet): a phase found over where a resume starts runs its
    # phase-end pass only if none ran at that step (None: a checkpoint that did not record it, ``migrate``)
    validated_at: int | None = -1
    # guard.max_train_minutes (xpt_ds.training.time_budget), counted only while it is on: the loop's seconds so far
    # (the slowest rank's, so the same on every rank), their count when the current phase started, and the phases
    # its budget ended
    train_seconds: float = 0.0
    phase_start_seconds: float = 0.0
    time_stopped: list[int] = field(default_factory=list)

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, sd: dict) -> None:
        """``sd`` in today's layout (``xpt_ds.checkpoint.migrate`` rewrites older ones); a field this version does
        not know comes from a newer one, whose state would be dropped at the next save."""
        unknown = sorted(set(sd) - {f.name for f in fields(self)})
        if unknown:
            raise CheckpointError(f"the checkpoint's trainer state holds {', '.join(unknown)}, which this xpt-ds "
                                  "does not know: it was written by a newer version; resume it with that one")
        for k, v in sd.items():
            setattr(self, k, v)
