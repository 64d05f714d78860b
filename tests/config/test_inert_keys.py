"""Settings that were accepted and did nothing (review R, 2026-12-05) are one error line naming the key: masking keys
where nothing masks (a decoder source; model.mask_token where a Hugging Face tokenizer's own mask token is used), a
guard's window or margin where its check is off, and DeepSpeed JSON sections xpt-ds does not read (the legacy
cpu_offload spelling, activation_checkpointing, DeepSpeed's own monitors)."""
import importlib

import pytest

from conftest import base_config, write_config
from xpt_ds.cli import main
from xpt_ds.config import ConfigError, DataConfig, ModelConfig, TrainConfig, from_dict, validate
from xpt_ds.config.engine_support import unsupported
from xpt_ds.config.validate import problems

checks = importlib.import_module("xpt_ds.config.validate")  # the module: xpt_ds.config.validate is its function


def _config(tmp_path, model=None, guard=None) -> dict:
    """A runnable config whose paths need not exist (no check here reads a file)."""
    cfg = base_config(tmp_path / "run", tmp_path / "source", tmp_path / "corpus")
    cfg["model"].update(model or {})
    cfg["guard"] = guard or {}
    return cfg


def _problems(tmp_path, **sections) -> list[str]:
    return problems(from_dict(TrainConfig, _config(tmp_path, **sections)))


@pytest.mark.parametrize("method", ["keep_vocab", "extend"])
def test_a_mask_token_where_the_hugging_face_tokenizer_masks_is_one_line(tmp_path, method):
    found = _problems(tmp_path, model={"method": method, "mask_token": "X"})
    line = [p for p in found if "'model.mask_token'" in p]
    assert line == [f"config key 'model.mask_token' is set but model.method is '{method}', which masks with the "
                    "Hugging Face tokenizer's own mask token, if any (only the SentencePiece methods read it: scratch, "
                    "adapters, xpt_sp, xpt, xpt_no_itl, random_source, lora, trelm, trelm_no_tri)"], found
    assert not any("mask_token" in p for p in _problems(tmp_path, model={"method": "xpt", "mask_token": "</s>"}))


GUARDS = [
    ({"early_stop_min_delta": 0.5},
     "config key 'guard.early_stop_min_delta' is set but guard.early_stop_patience is 0 (off; only early stopping "
     "reads it)"),
    ({"loss_spike_window": 50, "loss_spike_ratio": 0},
     "config key 'guard.loss_spike_window' is set but guard.loss_spike_ratio is 0 (off; only its check reads it)"),
    ({"slow_step_window": 10, "slow_step_ratio": 0},
     "config key 'guard.slow_step_window' is set but guard.slow_step_ratio is 0 (off; only its check reads it)"),
]


@pytest.mark.parametrize("guard,line", GUARDS, ids=[next(iter(g)) for g, _ in GUARDS])
def test_a_guard_setting_whose_check_is_off_is_one_line(tmp_path, capsys, guard, line):
    path = write_config(tmp_path / "cfg.yaml", _config(tmp_path, guard=guard))
    assert main(["train", "--config", str(path)]) == 2
    assert capsys.readouterr().err == f"error: {line}\n"
    with pytest.raises(ConfigError) as info:
        validate(from_dict(TrainConfig, _config(tmp_path, guard=guard)))
    assert str(info.value) == line


@pytest.mark.parametrize("guard", [
    {"early_stop_min_delta": 0.5, "early_stop_patience": 2},  # needs validation passes inside a phase
    {"loss_spike_window": 50}, {"slow_step_window": 10, "slow_step_ratio": 2.0},
    {"loss_spike_ratio": 0, "slow_step_ratio": 0, "early_stop_min_delta": 0.0},  # the defaults, written out
])
def test_a_guard_setting_whose_check_is_on_passes(tmp_path, guard):
    cfg = _config(tmp_path, guard=guard)
    cfg["logging"]["eval_every"] = 2
    assert problems(from_dict(TrainConfig, cfg)) == []


def test_a_bad_guard_value_is_said_once_as_before(tmp_path):
    assert _problems(tmp_path, guard={"early_stop_min_delta": -0.1}) == [
        "config key 'guard.early_stop_min_delta' must be a finite number >= 0, got -0.1"]
    assert _problems(tmp_path, guard={"loss_spike_window": 1, "loss_spike_ratio": 0}) == [
        "config key 'guard.loss_spike_window' must be >= 2, got 1"]


DECODER = [
    ({"mask_prob": 0.3}, {}, "config key 'data.mask_prob' is 0.3, but model.source is a decoder, which trains on "
                             "every next token (nothing is masked); leave it at 0.15"),
    ({"mask_replace_prob": 0.9}, {}, "config key 'data.mask_replace_prob' is 0.9, but model.source is a decoder, "
                                     "which trains on every next token (nothing is masked); leave it at 0.8"),
    ({"random_replace_prob": 0.0}, {}, "config key 'data.random_replace_prob' is 0.0, but model.source is a "
                                       "decoder, which trains on every next token (nothing is masked); leave it at "
                                       "0.1"),
    ({}, {"mask_token": "</s>"}, "config key 'model.mask_token' is '</s>', but model.source is a decoder, which "
                                 "trains on every next token (nothing is masked); leave it empty"),
]


@pytest.mark.parametrize("data,model,line", DECODER, ids=[next(iter({**d, **m})) for d, m, _ in DECODER])
def test_a_masking_key_on_a_decoder_source_is_one_line(data, model, line):
    assert checks.decoder_problems(ModelConfig(**model), DataConfig(**data)) == [line]


def test_a_decoder_source_with_the_masking_defaults_passes():
    assert checks.decoder_problems(ModelConfig(), DataConfig()) == []


Z2 = {"stage": 2}
MONITOR_OUT = "; DeepSpeed's own monitor writes a second set of logs outside the run directory: remove it (xpt-ds " \
              "writes RUN_DIR/tb and RUN_DIR/metrics.jsonl itself; logging.tensorboard)"
ENGINE = [
    ({"zero_optimization": Z2, "activation_checkpointing": {"partition_activations": True}},
     "activation_checkpointing is set; DeepSpeed's activation checkpointing is for models that call "
     "deepspeed.checkpointing, which xpt-ds's do not (its settings changed nothing): remove it and set "
     "activations.checkpoint_every, xpt-ds's own recompute"),
    ({"zero_optimization": Z2, "tensorboard": {"enabled": True, "output_path": "/tmp/x"}},
     "tensorboard.enabled is true" + MONITOR_OUT),
    ({"zero_optimization": Z2, "csv_monitor": {"enabled": True}}, "csv_monitor.enabled is true" + MONITOR_OUT),
    ({"zero_optimization": Z2, "wandb": {"enabled": True}}, "wandb.enabled is true" + MONITOR_OUT),
    ({"zero_optimization": Z2, "comet": {"enabled": True}}, "comet.enabled is true" + MONITOR_OUT),
]


@pytest.mark.parametrize("ds,line", ENGINE, ids=[n.split()[0].rstrip(";:,") for _, n in ENGINE])
@pytest.mark.parametrize("torch_adam", [True, False])
def test_a_deepspeed_section_xpt_does_not_read_is_one_reason(ds, line, torch_adam):
    assert unsupported(ds, torch_adam=torch_adam, device="cpu") == line


def test_the_legacy_cpu_offload_without_torch_adam_is_one_reason():
    """With optim.torch_adam false xpt-ds picked FusedAdam (it reads offload_optimizer.device only) and
    deepspeed.initialize raised a ZeRORuntimeException after the model's build (review R's ds_cpuoff.json)."""
    assert unsupported({"zero_optimization": {**Z2, "cpu_offload": True}}, torch_adam=False, device="cpu") == (
        "zero_optimization.cpu_offload is true with optim.torch_adam false; xpt-ds picks DeepSpeed's CPU Adam by "
        "offload_optimizer.device only, and DeepSpeed stopped at FusedAdam with a ZeRORuntimeException after the "
        "model was built: write zero_optimization.offload_optimizer: {device: cpu} instead (the same setting)")


@pytest.mark.parametrize("ds,torch_adam", [
    ({"zero_optimization": {**Z2, "cpu_offload": True}}, True),  # trained as offload_optimizer does (docs/cluster.md)
    ({"zero_optimization": {"stage": 3, "cpu_offload_param": True}}, False),  # xpt-ds reads offload_param for nvme only
    ({"zero_optimization": {**Z2, "offload_optimizer": {"device": "cpu"}}}, False),
    ({"zero_optimization": Z2, "tensorboard": {"enabled": False}, "csv_monitor": {"enabled": False}}, True),
])
def test_the_same_settings_where_they_work_or_are_off_pass(ds, torch_adam):
    assert unsupported(ds, torch_adam=torch_adam, device="cpu") is None
