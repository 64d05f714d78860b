"""What a checkpoint holds besides the engine is one registry (xpt_ds.checkpoint.registry): a new piece of state is
one registration, saved in every checkpoint and restored by a resume; older layouts are read through
xpt_ds.checkpoint.migrate."""
import json

import pytest

from conftest import base_config, launch, write_config
from xpt_ds.checkpoint import migrate
from xpt_ds.checkpoint.registry import StateRegistry
from xpt_ds.checkpoint.store import read_client_state
from xpt_ds.checkpoint.tags import CheckpointError, tag_for
from xpt_ds.training.state import TrainerState


class Counter:
    def __init__(self, n=0):
        self.n = n

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, sd):
        self.n = sd["n"]


def test_saving_and_loading_walk_the_registry():
    reg = StateRegistry()
    a, b, rng = Counter(3), Counter(5), Counter(7)
    reg.register("a", a)
    reg.register("b", b)
    reg.register("rng", rng, per_rank=True)
    reg.record("config", lambda: {"seed": 1})
    assert reg.client_state() == {"a": {"n": 3}, "b": {"n": 5}, "config": {"seed": 1}}
    assert reg.rank_state() == {"rng": {"n": 7}}
    a.n = b.n = rng.n = 0
    assert reg.load_client({"a": {"n": 3}, "config": {"seed": 2}}) == ["b"]  # b: an older checkpoint's lack
    assert (a.n, b.n) == (3, 0)
    assert reg.load_rank({"rng": {"n": 7}}) == [] and rng.n == 7
    with pytest.raises(ValueError, match="'a' is registered twice"):
        reg.register("a", Counter())


def test_older_client_states_are_read_in_todays_layout():
    old = {"config": {"data": {"seq_len": 64}}, "data": {"sequences": 10},
           "trainer": {"tokens_seen": 500, "phase_step": 7}}
    new = migrate.client_state(old)
    assert new["data"] == {"seq_len": 64, "sequences": 10}
    # the schedule went on at every step then, skipped ones too
    # no phase end was kept then, and the last validation pass's step was not recorded
    assert new["trainer"] == {"tokens_seen": 500, "target_tokens_seen": 500, "phase_step": 7, "phase_updates": 7,
                              "phase_ends": {}, "validated_at": None}
    assert old["data"] == {"sequences": 10} and "phase_updates" not in old["trainer"]  # the caller's dict is kept
    today = {"config": {"data": {"seq_len": 64}}, "data": {"seq_len": 32, "sequences": 1},
             "trainer": {**TrainerState(tokens_seen=5, target_tokens_seen=4, phase_step=7, phase_updates=6,
                                        validated_at=4).state_dict()}}
    assert migrate.client_state(today) == today
    state = TrainerState()
    state.load_state_dict(new["trainer"])
    assert (state.phase_updates, state.validated_at, state.train_seconds) == (7, None, 0.0)
    with pytest.raises(CheckpointError, match="^the checkpoint's trainer state holds later_field, which this xpt-ds "
                       "does not know: it was written by a newer version; resume it with that one$"):
        state.load_state_dict({**today["trainer"], "later_field": 1})
    assert migrate.saved_world_size({"world_size": 4}, {"dp_world_size": 2}) == 4
    assert migrate.saved_world_size({}, {"dp_world_size": 2}) == 2


class Probe:
    """A new piece of trainer state: how many steps it saw, and what a resume gave it (written to a file)."""

    def __init__(self, state, out):
        self.state, self.out = state, out

    def state_dict(self):
        return {"saved_at": self.state.global_step}

    def load_state_dict(self, sd):
        with open(self.out, "w") as f:
            json.dump(sd, f)


@pytest.mark.multiproc
def test_an_older_runs_phase_end_is_read_through_the_migration(tmp_path):
    """A phase end kept before 2026-11-28 (``NAME.pt``: weights and data position in one file) loads when its
    digest is the run's record, is refused with one line naming the file when it is not, and gives way to the
    current files once they exist."""
    import torch

    from xpt_ds.checkpoint.phase_ends import PHASE_ENDS, load_phase_end, phase_end_files
    from xpt_ds.checkpoint.tags import CheckpointError
    from xpt_ds.checkpoint.values import state_digest
    base = tmp_path / PHASE_ENDS
    base.mkdir()
    weights = {"hf.w": torch.arange(6.0).reshape(2, 3)}
    torch.save({"weights": weights, "data": {"epoch": 2}}, base / "phase1.pt")
    assert phase_end_files(tmp_path, "phase1") == [base / "phase1.pt"]
    value, data = load_phase_end(tmp_path, "phase1", state_digest(weights))
    assert torch.equal(value("hf.w"), weights["hf.w"]) and data == {"epoch": 2}
    with pytest.raises(CheckpointError, match=r"phase1\.pt is not what phase 'phase1' ended with"):
        load_phase_end(tmp_path, "phase1", "0" * 32)
    (base / "phase1.safetensors").write_bytes(b"")  # today's file wins; the .pt is no longer read
    assert migrate.older_phase_end(base, "phase1") is None


def test_a_new_piece_of_state_is_one_registration(tiny_roberta, corpus, tmp_path, monkeypatch):
    """The first run registers nothing new; its resume registers ``probe`` (a checkpoint from before the piece
    existed: it starts fresh, and the log says so), saves it in its checkpoints, and a second resume gets it back."""
    from xpt_ds.training import build
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus)
    cfg["phases"] = [{"name": "p1", "steps": 2, "lr": 1e-3, "warmup_steps": 1}]
    assert launch(["--config", str(write_config(tmp_path / "a.yaml", cfg))]).returncode == 0
    register, out = build.register_state, tmp_path / "probe.json"

    def register_with_probe(checkpointer, cfg, state, *args):
        register(checkpointer, cfg, state, *args)
        checkpointer.registry.register("probe", Probe(state, out))  # the one line a new piece of state needs

    monkeypatch.setattr(build, "register_state", register_with_probe)
    cfg["phases"][0]["steps"] = 3
    proc = launch(["--config", str(write_config(tmp_path / "b.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "checkpoint global_step000000002 holds no probe" in proc.stderr and not out.exists()
    assert read_client_state(tmp_path / "run/checkpoints", tag_for(3))["probe"] == {"saved_at": 3}
    cfg["phases"][0]["steps"] = 4
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text()) == {"saved_at": 3}
    assert read_client_state(tmp_path / "run/checkpoints", tag_for(4))["probe"] == {"saved_at": 4}
