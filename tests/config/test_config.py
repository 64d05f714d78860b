import json
import math
from pathlib import Path

import pytest
import yaml

from xpt_ds.config import ConfigError, PhaseConfig, TrainConfig, load_config, save_config, to_dict
from xpt_ds.config.schedule import lr_at
from xpt_ds.training.engine import OWNED_KEYS, build_ds_config, load_ds_config, no_skip_reason

REPO = Path(__file__).resolve().parents[2]
DS_CONFIGS = sorted((REPO / "ds_configs").glob("*.json"))
RUN_CONFIGS = sorted((REPO / "launch" / "configs").glob("*.yaml"))


def minimal(**sections) -> dict:
    cfg = {
        "model": {"source": "roberta-base", "tokenizer": "spm.model"},
        "phases": [{"name": "p1", "steps": 10, "lr": 1.0e-3, "warmup_steps": 2},
                   {"name": "p2", "steps": 20, "lr": 5.0e-4}],
        "data": {"train_shards": ["train-000000.tar"]},
    }
    cfg.update(sections)
    return cfg


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def config_error(tmp_path, data: dict, overrides=()) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(str(write_yaml(tmp_path / "cfg.yaml", data)), list(overrides))
    msg = str(info.value)
    assert "\n" not in msg, msg
    return msg



def test_defaults_fill_what_the_file_omits(tmp_path):
    cfg = load_config(str(write_yaml(tmp_path / "cfg.yaml", minimal())))
    assert cfg.optim.micro_batch_size == 8
    assert cfg.optim.betas == [0.9, 0.98]
    assert cfg.data.seq_len == 512
    assert cfg.phases[1].decay == "linear"
    assert cfg.phases[1].warmup_steps == 0
    assert cfg.model.method == "xpt"
    assert cfg.logging.tensorboard is True


def test_yaml_file_beats_defaults(tmp_path):
    data = minimal(optim={"micro_batch_size": 4, "grad_accum": 3}, seed=7)
    cfg = load_config(str(write_yaml(tmp_path / "cfg.yaml", data)))
    assert (cfg.optim.micro_batch_size, cfg.optim.grad_accum, cfg.seed) == (4, 3, 7)
    assert cfg.phases[0].lr == 1e-3 and isinstance(cfg.phases[0].lr, float)


def test_json_file_beats_defaults(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(minimal(optim={"micro_batch_size": 4}, data={"train_shards": ["a.tar"], "seq_len": 64})))
    cfg = load_config(str(path))
    assert cfg.optim.micro_batch_size == 4
    assert cfg.data.seq_len == 64
    assert cfg.data.train_shards == ["a.tar"]


def test_override_beats_file(tmp_path):
    path = write_yaml(tmp_path / "cfg.yaml", minimal(optim={"micro_batch_size": 4, "grad_accum": 3}))
    cfg = load_config(str(path), ["--optim.micro_batch_size=16", "--model.method=xpt_sp", "--seed=5"])
    assert cfg.optim.micro_batch_size == 16
    assert cfg.optim.grad_accum == 3
    assert cfg.model.method == "xpt_sp"
    assert cfg.seed == 5


def test_override_beats_default(tmp_path):
    cfg = load_config(str(write_yaml(tmp_path / "cfg.yaml", minimal())), ["--logging.tensorboard=false"])
    assert cfg.logging.tensorboard is False


def test_override_list_index(tmp_path):
    path = write_yaml(tmp_path / "cfg.yaml", minimal())
    cfg = load_config(str(path), ["--phases.0.steps=3", "--phases.1.decay=cosine", "--data.train_shards.0=b.tar"])
    assert cfg.phases[0].steps == 3
    assert cfg.phases[0].lr == 1e-3
    assert cfg.phases[1].decay == "cosine"
    assert cfg.phases[1].steps == 20
    assert cfg.data.train_shards == ["b.tar"]


def test_override_whole_list(tmp_path):
    cfg = load_config(str(write_yaml(tmp_path / "cfg.yaml", minimal())), ["--phases.0.trainable=['@new', '@itl']"])
    assert cfg.phases[0].trainable == ["@new", "@itl"]
    assert cfg.phases[1].trainable == []


def test_overrides_without_file():
    cfg = load_config(None, ["--model.source=src", "--model.tokenizer=spm.model", "--data.train_shards=[a.tar]",
                             "--phases=[{name: only, steps: 2, lr: 0.1}]"])
    assert cfg.phases == [PhaseConfig(name="only", steps=2, lr=0.1)]
    assert cfg.data.train_shards == ["a.tar"]


def test_override_index_out_of_range(tmp_path):
    msg = config_error(tmp_path, minimal(), ["--phases.7.steps=3"])
    assert "--phases.7.steps=3" in msg


@pytest.mark.parametrize("value", ["@new", '[@new, "!@itl"]'])
def test_override_that_is_not_yaml_names_key_and_says_to_quote(tmp_path, value):
    msg = config_error(tmp_path, minimal(), [f"--phases.0.trainable={value}"])
    assert "'phases[0].trainable'" in msg and "quote" in msg


def test_malformed_override(tmp_path):
    msg = config_error(tmp_path, minimal(), ["--optim.micro_batch_size"])
    assert "--optim.micro_batch_size" in msg


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "nope.yaml"))


def test_unparsable_config_file(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("model:\n  source: x\nphases: [a, b\ndata: {}\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert "(line 3, column 9)" in str(info.value)  # where the unclosed list starts



@pytest.mark.parametrize("data, key", [
    (minimal(modle={}), "modle"),
    (minimal(model={"sourc": "x", "tokenizer": "t"}), "model.sourc"),
    (minimal(optim={"lr": 1.0}), "optim.lr"),
    (minimal(phases=[{"name": "p", "steps": 1, "lr": 0.1, "warmup": 1}]), "phases[0].warmup"),
])
def test_unknown_key_named(tmp_path, data, key):
    msg = config_error(tmp_path, data)
    assert f"'{key}'" in msg and "unknown" in msg


def test_unknown_key_via_override(tmp_path):
    msg = config_error(tmp_path, minimal(), ["--data.seq_length=128"])
    assert "'data.seq_length'" in msg


@pytest.mark.parametrize("data, key", [
    (minimal(optim={"micro_batch_size": "8"}), "optim.micro_batch_size"),
    (minimal(model={"source": "s", "tokenizer": "t", "itl_init": 3}), "model.itl_init"),
    (minimal(logging={"tensorboard": 1}), "logging.tensorboard"),
    (minimal(optim={"torch_adam": 0}), "optim.torch_adam"),
    (minimal(model={"source": "s", "tokenizer": "t", "phase1_trains_position_and_head": 1}),
     "model.phase1_trains_position_and_head"),
    (minimal(optim={"grad_accum": True}), "optim.grad_accum"),
    (minimal(optim={"micro_batch_size": 2.0}), "optim.micro_batch_size"),
    (minimal(phases=[{"name": "p", "steps": 1, "lr": "fast"}]), "phases[0].lr"),
    (minimal(phases=[{"name": "p", "steps": 1, "lr": 0.1, "trainable": "@all"}]), "phases[0].trainable"),
    (minimal(phases=[{"name": "p", "steps": 1, "lr": 0.1, "trainable": ["@new", 3]}]), "phases[0].trainable[1]"),
    (minimal(data={"train_shards": "a.tar"}), "data.train_shards"),
    (minimal(optim={"betas": [0.9, "x"]}), "optim.betas[1]"),
    (minimal(model="roberta-base"), "model"),
])
def test_wrong_type_named(tmp_path, data, key):
    assert f"'{key}" in config_error(tmp_path, data)


def test_wrong_type_via_override(tmp_path):
    msg = config_error(tmp_path, minimal(), ["--optim.grad_accum=two"])
    assert "'optim.grad_accum'" in msg


def test_int_accepted_for_float(tmp_path):
    cfg = load_config(str(write_yaml(tmp_path / "cfg.yaml", minimal(optim={"grad_clip": 2}))))
    assert cfg.optim.grad_clip == 2.0 and isinstance(cfg.optim.grad_clip, float)



def _phases(**changes) -> list[dict]:
    return [{"name": "p1", "steps": 10, "lr": 1e-3, **changes}]


@pytest.mark.parametrize("data, fragment", [
    (minimal(model={"source": "s", "tokenizer": "t", "method": "xpt2"}), "model.method"),
    (minimal(model={"source": "s", "tokenizer": "t", "itl_init": "zeros"}), "model.itl_init"),
    (minimal(phases=_phases(warmup_steps=11)), "phases[0].warmup_steps"),
    (minimal(phases=_phases(warmup_steps=-1)), "phases[0].warmup_steps"),
    (minimal(phases=_phases(steps=0)), "phases[0].steps"),
    (minimal(phases=_phases(steps=-3)), "phases[0].steps"),
    (minimal(phases=_phases(lr=0.0)), "phases[0].lr"),
    (minimal(phases=_phases(decay="exponential")), "phases[0].decay"),
    (minimal(phases=_phases(min_lr_ratio=1.5)), "phases[0].min_lr_ratio"),
    (minimal(phases=[{"name": "same", "steps": 1, "lr": 0.1}, {"name": "same", "steps": 1, "lr": 0.1}]), "phases"),
    (minimal(phases=[{"steps": 1, "lr": 0.1}]), "phases[0].name"),
    (minimal(phases=[]), "phases"),
    (minimal(model={"source": "", "tokenizer": "t"}), "model.source"),
    (minimal(model={"source": "s"}), "model.tokenizer"),
    (minimal(data={"train_shards": []}), "data.train_shards"),
    (minimal(optim={"micro_batch_size": 0}), "optim.micro_batch_size"),
    (minimal(optim={"betas": [0.9]}), "optim.betas"),
    (minimal(phases=_phases(lr=float("nan"))), "phases[0].lr"),
    (minimal(phases=_phases(lr=float("inf"))), "phases[0].lr"),
    (minimal(optim={"betas": [1.5, 0.9]}), "optim.betas[0]"),
    (minimal(optim={"betas": [0.9, -0.1]}), "optim.betas[1]"),
    (minimal(optim={"eps": -1.0}), "optim.eps"),
    (minimal(optim={"weight_decay": -0.01}), "optim.weight_decay"),
    (minimal(optim={"grad_clip": float("nan")}), "optim.grad_clip"),
    (minimal(model={"source": "s", "tokenizer": "t", "dropout": 1.5}), "model.dropout"),
    (minimal(model={"source": "s", "tokenizer": "t", "method": "lora", "itl_init": "copy"}), "model.itl_init"),
    (minimal(model={"source": "s", "tokenizer": "t", "method": "scratch", "itl_init": "copy"}), "model.itl_init"),
    (minimal(model={"source": "s", "tokenizer": "t", "method": "scratch", "embedding_init": "source_mean"}),
     "model.embedding_init"),  # Scratch's rows would come from the source's embeddings
    (minimal(data={"train_shards": ["a.tar"], "seed": -1}), "data.seed"),  # was a ValueError traceback in packing
    (minimal(checkpoint={"every_steps": -1}), "checkpoint.every_steps"),
])
def test_validation_names_key(tmp_path, data, fragment):
    assert f"'{fragment}'" in config_error(tmp_path, data)


def test_bad_method_lists_valid_ones(tmp_path):
    msg = config_error(tmp_path, minimal(), ["--model.method=xlt"])
    assert "'xlt'" in msg and "xpt_no_itl" in msg


def test_bad_decay_lists_valid_ones(tmp_path):
    msg = config_error(tmp_path, minimal(), ["--phases.1.decay=step"])
    assert "'phases[1].decay'" in msg and "cosine" in msg


def test_duplicate_phase_names(tmp_path):
    msg = config_error(tmp_path, minimal(), ["--phases.1.name=p1"])
    assert "duplicate" in msg and "p1" in msg



def test_save_config_roundtrip(tmp_path):
    overrides = ["--phases.0.trainable=['@new', 'roberta\\..*']", "--phases.1.decay=cosine",
                 "--phases.1.min_lr_ratio=0.1", "--optim.betas=[0.9, 0.999]", "--optim.eps=1.0e-8",
                 "--logging.progress_bar=false", "--model.dropout=0.0", "--data.valid_shards=[v.tar]"]
    cfg = load_config(str(write_yaml(tmp_path / "cfg.yaml", minimal())), overrides)
    save_config(cfg, tmp_path / "saved.yaml")
    again = load_config(str(tmp_path / "saved.yaml"))
    assert again == cfg
    assert isinstance(again, TrainConfig)


def test_saved_config_roundtrips_as_json(tmp_path):
    cfg = load_config(str(write_yaml(tmp_path / "cfg.yaml", minimal())))
    (tmp_path / "saved.json").write_text(json.dumps(to_dict(cfg)))
    assert load_config(str(tmp_path / "saved.json")) == cfg



def test_ds_configs_shipped():
    assert len(DS_CONFIGS) >= 6


@pytest.mark.parametrize("path", DS_CONFIGS, ids=lambda p: p.name)
def test_shipped_ds_config_loads(path):
    ds = load_ds_config(str(path))
    assert ds["zero_optimization"]["stage"] in (0, 1, 2, 3)


def test_which_engine_configs_skip_a_non_finite_step():
    """The guards count on DeepSpeed skipping a step with non-finite gradients; where it does not, the trainer
    says why at the start and in its halt line (tests/training/test_guards.py runs both kinds)."""
    reasons = {p.stem: no_skip_reason(load_ds_config(str(p))) for p in DS_CONFIGS}
    assert reasons["zero0_fp32"] == "ZeRO stage 0 cannot skip one"
    lean = "the DeepSpeed JSON's bf16.check_grad_overflow is false"
    assert reasons["zero1_bf16_lean"] == reasons["zero2_bf16_lean"] == lean
    assert [n for n, r in reasons.items() if r is None] == sorted(set(reasons) - {"zero0_fp32", "zero1_bf16_lean",
                                                                              "zero2_bf16_lean"})
    # ZeRO-3 checks whatever the JSON says; an fp32 model is checked through its gradient norm
    assert no_skip_reason({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True,
                                                                       "check_grad_overflow": False}}) is None
    assert no_skip_reason({"zero_optimization": {"stage": 2}, "bf16": {"check_grad_overflow": False}}) is None


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_shipped_run_config_loads(path):
    raw = yaml.safe_load(path.read_text())
    overrides = [] if raw.get("model", {}).get("source") else ["--model.source=dummy/source"]
    cfg = load_config(str(path), overrides)
    assert cfg.phases
    assert (REPO / cfg.deepspeed).is_file()
    load_ds_config(str(REPO / cfg.deepspeed))


def test_run_configs_shipped():
    assert RUN_CONFIGS



@pytest.mark.parametrize("key", sorted(OWNED_KEYS))
def test_ds_json_owned_key_rejected(tmp_path, key):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 1}, key: {"type": "x"} if key in (
        "optimizer", "scheduler") else 1}))
    with pytest.raises(ConfigError) as info:
        load_ds_config(str(path))
    msg = str(info.value)
    assert f"'{key}'" in msg and str(path) in msg and "\n" not in msg


def test_ds_json_nested_lr_rejected(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, "custom": {"params": {"lr": 1e-3}}}))
    with pytest.raises(ConfigError, match="'lr'"):
        load_ds_config(str(path))


def test_ds_json_bf16_stage0_rejected(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 0}, "bf16": {"enabled": True}}))
    with pytest.raises(ConfigError, match="bf16"):
        load_ds_config(str(path))


def test_ds_json_bf16_default_stage_rejected(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"bf16": {"enabled": True}}))
    with pytest.raises(ConfigError, match="bf16"):
        load_ds_config(str(path))


@pytest.mark.parametrize("stage", [7, "two", -1])
def test_ds_json_bad_zero_stage_rejected(tmp_path, stage):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": stage}}))
    with pytest.raises(ConfigError, match="zero_optimization.stage must be 0, 1, 2 or 3"):
        load_ds_config(str(path))


def test_ds_json_missing(tmp_path):
    with pytest.raises(ConfigError, match="'deepspeed'"):
        load_ds_config(str(tmp_path / "nope.json"))


def test_ds_json_unparsable(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text("{\"zero_optimization\": ")
    with pytest.raises(ConfigError) as info:
        load_ds_config(str(path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)



def _train_config(**optim) -> TrainConfig:
    return load_config(None, ["--model.source=s", "--model.tokenizer=t", "--data.train_shards=[a.tar]",
                              "--phases=[{name: p, steps: 1, lr: 0.1}]",
                              f"--deepspeed={REPO / 'ds_configs/zero2_fp32.json'}",
                              *(f"--optim.{k}={v}" for k, v in optim.items())])


@pytest.mark.parametrize("micro, accum, world", [(2, 3, 1), (4, 1, 8), (1, 5, 2)])
def test_build_ds_config_injects_batch_and_clip(micro, accum, world):
    ds = build_ds_config(_train_config(micro_batch_size=micro, grad_accum=accum, grad_clip=0.5), world)
    assert ds["train_micro_batch_size_per_gpu"] == micro
    assert ds["gradient_accumulation_steps"] == accum
    assert ds["train_batch_size"] == micro * accum * world
    assert ds["gradient_clipping"] == 0.5
    assert ds["zero_optimization"] == {"stage": 2}
    assert "optimizer" not in ds and "scheduler" not in ds


def test_build_ds_config_torch_adam_flags():
    assert build_ds_config(_train_config(torch_adam=True), 1)["zero_allow_untested_optimizer"] is True
    assert "zero_allow_untested_optimizer" not in build_ds_config(_train_config(torch_adam=False), 1)



def test_lr_warmup_is_linear_to_peak():
    ph = PhaseConfig(name="p", steps=100, lr=1e-3, warmup_steps=10)
    lrs = [lr_at(ph, s) for s in range(10)]
    assert lrs == pytest.approx([1e-3 * (s + 1) / 10 for s in range(10)])
    assert lr_at(ph, 9) == pytest.approx(1e-3)
    assert lr_at(ph, 10) == pytest.approx(1e-3)
    assert all(b > a for a, b in zip(lrs, lrs[1:]))


@pytest.mark.parametrize("min_ratio", [0.0, 0.1])
def test_linear_decay_ends_at_min_lr(min_ratio):
    ph = PhaseConfig(name="p", steps=50, lr=2e-3, warmup_steps=10, decay="linear", min_lr_ratio=min_ratio)
    assert lr_at(ph, 50) == pytest.approx(min_ratio * 2e-3)
    assert lr_at(ph, 30) == pytest.approx(2e-3 * (min_ratio + (1 - min_ratio) * 0.5))
    lrs = [lr_at(ph, s) for s in range(10, 51)]
    assert all(b < a for a, b in zip(lrs, lrs[1:]))
    assert min(lrs) >= min_ratio * 2e-3 - 1e-12


@pytest.mark.parametrize("min_ratio", [0.0, 0.2])
def test_cosine_midpoint_is_halfway(min_ratio):
    ph = PhaseConfig(name="p", steps=110, lr=1e-3, warmup_steps=10, decay="cosine", min_lr_ratio=min_ratio)
    peak, floor = 1e-3, min_ratio * 1e-3
    assert lr_at(ph, 10) == pytest.approx(peak)
    assert lr_at(ph, 60) == pytest.approx((peak + floor) / 2)
    assert lr_at(ph, 110) == pytest.approx(floor)
    assert lr_at(ph, 35) == pytest.approx(floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi / 4)))


def test_constant_stays_at_peak():
    ph = PhaseConfig(name="p", steps=20, lr=3e-4, warmup_steps=4, decay="constant", min_lr_ratio=0.5)
    assert [lr_at(ph, s) for s in range(4, 21)] == pytest.approx([3e-4] * 17)
    assert lr_at(ph, 0) == pytest.approx(3e-4 / 4)


def test_no_warmup_starts_at_peak():
    ph = PhaseConfig(name="p", steps=10, lr=1e-3, warmup_steps=0)
    assert lr_at(ph, 0) == pytest.approx(1e-3)


def test_renamed_key_names_its_new_name(tmp_path):
    with pytest.raises(ConfigError, match=r"'guard.straggler_ratio' was renamed 'guard.slow_step_ratio'"):
        load_config(None, ["--guard.straggler_ratio=2.0"])


def test_checkpoint_config_with_an_old_key_still_loads():
    from xpt_ds.config import read_checkpoint_config, to_dict
    data = to_dict(TrainConfig())
    data["guard"].pop("slow_step_ratio")
    data["guard"]["straggler_ratio"] = 7.0
    assert read_checkpoint_config(data).guard.slow_step_ratio == 7.0


def test_list_fields_declare_their_element_types():
    import dataclasses
    import typing

    def lists(cls):
        for f in dataclasses.fields(cls):
            typ = typing.get_type_hints(cls)[f.name]
            if dataclasses.is_dataclass(typ):
                yield from lists(typ)
            elif typing.get_origin(typ) is list:
                yield f.name, typing.get_args(typ)
    found = dict(lists(TrainConfig))
    assert found and all(len(args) == 1 for args in found.values()), found
    with pytest.raises(ConfigError, match="data.train_shards"):
        load_config(None, ["--data.train_shards=[1, 2]"])


def test_help_lists_every_key_with_its_default_phase_keys_included():
    """``xpt-ds train --help``'s epilog: every section's keys, and each phase's as ``--phases.N.key``."""
    import dataclasses

    from xpt_ds.config import help_text
    text = help_text()
    for f in dataclasses.fields(PhaseConfig):
        assert f"--phases.N.{f.name}=" in text or f"--phases.N.{f.name}." in text, f.name
    assert "--optim.micro_batch_size=" in text and "--phases.N.lr=0.0001" in text


def test_the_config_reference_is_current_and_lists_every_key():
    """docs/config.md is written from the config tree; a key added, renamed or re-described without regenerating
    it fails here (``python -m xpt_ds.config.reference > docs/config.md``)."""
    import dataclasses
    import typing

    from xpt_ds.config.job import _element_type, _field_type
    from xpt_ds.config.reference import markdown
    text = (Path(__file__).parents[2] / "docs/config.md").read_text()
    assert text == markdown(), "docs/config.md is stale: python -m xpt_ds.config.reference > docs/config.md"

    def keys(cls, prefix=""):
        for f in dataclasses.fields(cls):
            typ = _field_type(f)
            if dataclasses.is_dataclass(typ):
                yield from keys(typ, f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}"
                if typing.get_origin(typ) is list and dataclasses.is_dataclass(_element_type(typ)):
                    yield from keys(_element_type(typ), f"{prefix}{f.name}.N.")
    every = list(keys(TrainConfig))
    assert len(every) > 70 and all(f"| `{k}` |" in text for k in every), [k for k in every if f"| `{k}` |" not in text]
