"""The run's checkpoints as one component: where they are, what each holds besides the engine (its
``StateRegistry``), the newest complete one, and keep_last. The files themselves: ``xpt_ds.checkpoint.store``."""
from __future__ import annotations

import logging
from pathlib import Path

from xpt_ds.checkpoint import migrate, store, tags
from xpt_ds.checkpoint.registry import StateRegistry
from xpt_ds.checkpoint.rng import RNGState
from xpt_ds.checkpoint.universal import drop_converted
from xpt_ds.checkpoint.values import CheckpointValues, ValueFile
from xpt_ds.config import ConfigError
from xpt_ds.io.paths import unwritable

log = logging.getLogger(__name__)


class Checkpointer:
    def __init__(self, run_dir: Path, ckpt_cfg, rank: int):
        self.root = Path(run_dir) / "checkpoints"
        self.keep_last, self.allow_pickle, self.rank = ckpt_cfg.keep_last, ckpt_cfg.allow_pickle, rank
        self.registry = StateRegistry()
        self.registry.register("rng", RNGState(), per_rank=True)
        self.last_saved: str | None = None  # newest complete checkpoint of this run
        self.hf_config = self.tokenizer = None  # written beside each checkpoint: set once the model is planned

    @classmethod
    def open(cls, run_dir: Path, ckpt_cfg, rank: int) -> Checkpointer:
        """The run's checkpointer, once every rank can write the run directory and its checkpoints (now, before
        minutes of model building, not at the first save)."""
        why = unwritable(run_dir, rank)
        if store.agree(why):
            raise ConfigError(f"config key 'run_dir': cannot write {run_dir}: "
                              f"{why or 'another rank cannot (see its error)'}")
        checkpointer = cls(run_dir, ckpt_cfg, rank)
        store.check_writable(checkpointer.root, rank)
        return checkpointer

    def resume_point(self, resume: str) -> tuple[str | None, dict | None]:
        """(the tag ``checkpoint.resume`` names, its client state in today's layout), or (None, None)."""
        tag = tags.resolve_tag(self.root, resume, "--resume", ("auto", "none"))
        if tag is None:
            return None, None
        return tag, migrate.client_state(store.read_client_state(self.root, tag, self.allow_pickle))

    def restore_client(self, client: dict) -> list[str]:
        """Every registered piece from ``client``; returns the pieces it lacks (an older checkpoint's)."""
        return self.registry.load_client(client)

    def restore_engine(self, engine, tag: str, universal: bool) -> ValueFile:
        """The engine and this rank's pieces (RNG) from ``tag``; returns its frozen fp32 weights file."""
        values, rank_state = store.load(engine, self.root, tag, universal, self.allow_pickle)
        self.registry.load_rank(rank_state)
        self.last_saved = tag
        return values

    def restore_values(self, tag: str) -> CheckpointValues:
        """This rank's pieces (RNG) from ``tag``, whose engine state is its values alone (a resume at another scale
        of a checkpoint whose optimizer holds no state: ``universal.prepare_rescale``); returns those values."""
        self.registry.load_rank(store.load_rank_state(self.root / tag, self.allow_pickle))
        self.last_saved = tag
        return CheckpointValues(self.root, tag, self.allow_pickle)

    def save(self, engine, frozen, global_step: int) -> str:
        tag = tags.tag_for(global_step)
        store.save(engine, self.root, tag, self.registry.client_state(), frozen, self.hf_config, self.tokenizer,
                   rank_state=self.registry.rank_state())
        self.last_saved = tag
        return tag

    def saved_at(self, global_step: int) -> bool:
        return self.last_saved == tags.tag_for(global_step)

    def prune(self, protected: str | None) -> None:
        """Rank 0, after a complete save: what keep_last and incomplete saves leave behind, and the universal copies
        of older checkpoints (``xpt_ds.checkpoint.universal``)."""
        for old in tags.prune(self.root, self.keep_last, protected):
            log.info("%s checkpoint %s (keep_last=%d)", "unlinked" if old.link else "deleted", old, self.keep_last)
        for tag, size in drop_converted(self.root):
            log.info("deleted the universal copy of checkpoint %s (%.2f GB): a resume from it at another scale "
                     "converts it again", tag, size / 1e9)
        for old in tags.remove_incomplete(self.root):
            log.info("%s incomplete checkpoint %s", "unlinked" if old.link else "deleted", old)
