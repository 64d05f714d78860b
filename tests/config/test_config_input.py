"""Config input that was taken wrongly: command-line values inside free-form options and lists the file leaves
out, values no run can use (validate), a YAML or JSON key given twice, and DeepSpeed JSONs with sections of the
wrong shape or keys DeepSpeed does not know."""
import json
import sys

import deepspeed
import pytest
import yaml

from conftest import REPO
from xpt_ds.config import ConfigError, TrainConfig, load_config
from xpt_ds.config.manager import config_yaml, read_config_file
from xpt_ds.training.engine import build_ds_config, check_with_deepspeed, engine_settings, load_ds_config


def _base(tmp_path, **sections):
    cfg = {"model": {"source": "roberta-base", "tokenizer": "spm.model"},
           "phases": [{"name": "p1", "steps": 10, "lr": 1.0e-3}, {"name": "p2", "steps": 20, "lr": 5.0e-4}],
           "data": {"train_shards": ["train-000000.tar"],
                    "mix": [{"name": "en", "shards": ["e.tar"], "weight": 0.1}]}, **sections}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    return str(tmp_path / "cfg.yaml")


def test_override_inside_a_free_form_option_is_a_plain_value(tmp_path):
    """Was the raw override text: a weight '0.2' always refused, and a phase name that --print-config and the
    run's save_config could not write (RepresenterError)."""
    cfg = load_config(_base(tmp_path), ["--phases.1.merge.take.@new=p1", "--phases.1.merge.average=[p1]",
                                        "--phases.1.mix.en=0.2"])
    assert cfg.phases[1].mix == {"en": 0.2} and cfg.phases[1].merge.take == {"@new": "p1"}
    assert type(cfg.phases[1].merge.take["@new"]) is str
    assert yaml.safe_load(config_yaml(cfg))["phases"][1]["merge"]["take"] == {"@new": "p1"}


@pytest.mark.parametrize("overrides, key, value", [
    (["--optim.betas.1=0.999"], "betas", [0.9, 0.999]),  # the default list, one element changed
    (["--phases=[{name: a, steps: 1, lr: 1.0e-3}]", "--phases.0.steps=5"], "phases", 5),
])
def test_override_of_one_element_of_a_list_the_file_leaves_out(tmp_path, overrides, key, value):
    cfg = load_config(_base(tmp_path), overrides)
    assert (cfg.optim.betas if key == "betas" else cfg.phases[0].steps) == value
    assert key == "betas" or [p.name for p in cfg.phases] == ["a"]


@pytest.mark.parametrize("override, message", [
    ("--logging.eval_batches=-1", "config key 'logging.eval_batches' must be >= 0"),
    ("--logging.eval_every=-5", "config key 'logging.eval_every' must be >= 0"),
    ("--guard.loss_spike_ratio=nan", "config key 'guard.loss_spike_ratio' must be > 1 (or 0 = off), got nan"),
    ("--guard.early_stop_min_delta=nan", "config key 'guard.early_stop_min_delta' must be a finite number >= 0"),
    ("--data.mask_replace_prob=nan", "config keys 'data.mask_*' must satisfy"),
    ("--logging.peak_tflops=nan", "config key 'logging.peak_tflops' must be a finite number >= 0"),
    # each was a traceback once the run started (an overflow in torch.manual_seed, timedelta, torch.empty or
    # torch.arange), or a timer thread's (the rescale timeout, then off), or a MemoryError after the build
    ("--seed=99999999999999999999", "config key 'seed' must be at most 9223372036854775807 (2**63 - 1)"),
    ("--data.seed=9223372036854775808", "config key 'data.seed' must be at most 9223372036854775807"),
    ("--guard.collective_timeout_s=1e308", "config key 'guard.collective_timeout_s' must be at most 31536000 (365 "
                                           "days), got 1e+308"),
    ("--checkpoint.rescale_timeout_minutes=1e308", "config key 'checkpoint.rescale_timeout_minutes' must be at most "
                                                   "525600 (365 days)"),
    ("--optim.micro_batch_size=99999999999999999999", "config key 'optim.micro_batch_size' must be at most 65536"),
    ("--optim.eps=0", "config key 'optim.eps' must be a finite number > 0"),  # halted at step 1, eps unnamed
    ("--data.train_tokens=1", "config key 'data.train_tokens' must be 0 (all) or at least data.seq_len=512"),
    ("--data.mix.0.weight=inf", "config key 'data.mix[0].weight' must be between 0 and 1"),
    ("--guard.inject_nan_steps=[-1, 0]", "config key 'guard.inject_nan_steps' holds steps below 1 (global steps "
                                         "count from 1): [-1, 0]"),  # were ignored
])
def test_values_no_run_can_use_are_refused(tmp_path, override, message):
    with pytest.raises(ConfigError) as info:
        load_config(_base(tmp_path), ["--model.method=adapters", override])
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)  # one problem: a bad data.mix weight blamed each phase's mix too


def test_yaml_key_given_twice_is_refused(tmp_path):
    """PyYAML keeps the second value silently; a merge key (<<) may still be overridden."""
    path = tmp_path / "cfg.yaml"
    path.write_text("phases: [{name: p, steps: 1, lr: 0.1}]\noptim:\n  micro_batch_size: 4\n  grad_accum: 2\n"
                    "  micro_batch_size: 8\n")
    with pytest.raises(ConfigError, match=r"found duplicate key 'micro_batch_size' \(line 5, column 3\)"):
        load_config(str(path))
    path.write_text("base: &o {micro_batch_size: 4, grad_accum: 2}\noptim:\n  <<: *o\n  grad_accum: 3\n")
    assert read_config_file(path)["optim"] == {"micro_batch_size": 4, "grad_accum": 3}


@pytest.mark.parametrize("body, key", [
    (b'{"zero_optimization": 2}', "zero_optimization must be an object, got 2"),
    (b'{"zero_optimization": {"stage": 2}, "bf16": true}', "bf16 must be an object, got true"),
    (b'{"zero_optimization": {"stage": 2}, "fp16": null}', "fp16 must be an object, got null"),
    (b'{"zero_optimization": {"stage": 2, "offload_optimizer": "cpu"}}',
     'zero_optimization.offload_optimizer must be an object, got "cpu"'),
    (b'{"zero_optimization": {"stage": 2}, "note": "\xff\xfe"}', "does not parse: 'utf-8' codec can't decode"),
])
def test_ds_json_of_the_wrong_shape_is_one_line(tmp_path, body, key):
    """Were AttributeErrors (in this check's own message, in the precision, in build_optimizer) and a
    UnicodeDecodeError; each left a run directory behind (tests/cli/test_bad_input.py runs one)."""
    path = tmp_path / "ds.json"
    path.write_bytes(body)
    with pytest.raises(ConfigError) as info:
        load_ds_config(str(path))
    assert str(info.value).startswith(f"DeepSpeed JSON {path}") and key in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_a_whole_entry_of_a_list_of_sections_on_the_command_line_is_yaml(tmp_path):
    """``--phases.1={...}`` and ``--data.mix.0={...}`` were refused as 'must be a mapping' (the raw text went to
    the section's builder); a whole list (``--phases=[...]``) was read as YAML already."""
    cfg = load_config(_base(tmp_path), ["--phases.1={name: p2, steps: 8, lr: 2.0e-4}",
                                        "--data.mix.0={name: en, shards: [b.tar], weight: 0.2}"])
    assert (cfg.phases[1].name, cfg.phases[1].steps, cfg.phases[1].lr) == ("p2", 8, 2.0e-4)
    assert (cfg.data.mix[0].shards, cfg.data.mix[0].weight) == (["b.tar"], 0.2)
    with pytest.raises(ConfigError, match=r"^config key 'phases\[1\]': cannot read '\{name: \[' as YAML"):
        load_config(_base(tmp_path), ["--phases.1={name: ["])
    with pytest.raises(ConfigError, match=r"^unknown config key 'phases\[1\]\.stpes'"):
        load_config(_base(tmp_path), ["--phases.1={name: p2, stpes: 8}"])


@pytest.mark.parametrize("overrides, message", [
    (["--run_dir="], "config key 'run_dir' is empty ('')"),  # --run_dir=$RUN_DIR with RUN_DIR unset: the cwd
    (["--run_dir=  "], "config key 'run_dir' is empty ('  ')"),
    (["--phases.1.decay=constant", "--phases.1.min_lr_ratio=0.1"],
     "config key 'phases[1].min_lr_ratio' is set but phases[1].decay is 'constant' (only linear and cosine read it)"),
    (["--phases.1.lr=fast"], "config key 'phases[1].lr' must be a float, got 'fast'"),  # was "an float"
    (["--model.method=adapters", "--model.adapter_size=-4"], "config key 'model.adapter_size' must be >= 1, got -4"),
    (["--model.method=adapters", "--model.adapter_size=0"], "config key 'model.adapter_size' must be >= 1, got 0"),
    (["--model.method=adapters", "--model.adapter_size=99999999999999999999"],
     "config key 'model.adapter_size' must be at most 65536"),
    # settings the method never reads (were accepted without a word, as if part of the recipe)
    (["--model.adapter_size=32"], "config key 'model.adapter_size' is set but model.method is 'xpt' (only adapters "
                                  "reads it)"),
    (["--model.method=scratch", "--model.lora.rank=4"], "config key 'model.lora' is set but model.method is "
                                                        "'scratch' (only lora reads it)"),
    (["--data.parallel_micro_batch=4"], "config key 'data.parallel_micro_batch' is set but model.method 'xpt' reads "
                                        "no parallel data (only trelm does)"),
])
def test_values_a_run_would_misread_are_refused(tmp_path, overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(_base(tmp_path), overrides)
    assert str(info.value).startswith(message) and "\n" not in str(info.value), str(info.value)


def test_a_constant_decay_with_the_default_min_lr_ratio_is_fine(tmp_path):
    cfg = load_config(_base(tmp_path), ["--phases.1.decay=constant", "--phases.1.min_lr_ratio=0.0"])
    assert cfg.phases[1].decay == "constant"


def test_a_directory_given_for_a_file_is_named_as_one(tmp_path):
    """Read "config file not found: DIR", as if the path were mistyped."""
    with pytest.raises(ConfigError) as info:
        read_config_file(tmp_path)
    assert str(info.value) == f"config file {tmp_path} is a directory, not a file"
    with pytest.raises(ConfigError) as info:
        read_config_file(tmp_path / "nope.yaml")
    assert str(info.value) == f"config file not found: {tmp_path / 'nope.yaml'}"


def test_json_key_given_twice_is_refused(tmp_path):
    """The json module keeps the second value silently (a YAML file was refused so already): in a run config,
    and in the DeepSpeed JSON."""
    path = tmp_path / "cfg.json"
    path.write_text('{"seed": 1, "optim": {"grad_accum": 4}, "optim": {"micro_batch_size": 2}}')
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert str(info.value) == f"config file {path} does not parse: key 'optim' is given twice in one object"
    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimization": {"stage": 2, "overlap_comm": true, "stage": 0}}')
    with pytest.raises(ConfigError) as info:
        load_ds_config(str(ds))
    assert str(info.value) == f"DeepSpeed JSON {ds} does not parse: key 'stage' is given twice in one object"


@pytest.mark.parametrize("ds, problem", [
    ({"zero_optimization": {"stage": 2, "overlap_com": True}},  # was a pydantic traceback after the model build
     "zero_optimization.overlap_com is no DeepSpeed setting; did you mean 'overlap_comm'?"),
    ({"zero_optimisation": {"stage": 2}},  # was ignored: the run trained at ZeRO stage 0
     "top-level key 'zero_optimisation' is no DeepSpeed setting (it would be ignored); did you mean "
     "'zero_optimization'?"),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvm"}}},
     "zero_optimization.offload_optimizer.device: Input should be 'none', 'cpu' or 'nvme', got 'nvm'"),
    ({"zero_optimization": {"stage": 1}, "timers": {"throughput": {"enabld": False}}},
     "timers.throughput.enabld is no DeepSpeed setting; did you mean 'enabled'?"),
    ({"zero_optimization": {"stage": 1}, "bf16": {"enabled": True}, "fp16": {"enabled": True}},
     "bfloat16 and fp16 modes cannot be simultaneously enabled"),
    ({"zero_optimization": {"stage": 1}, "checkpoint": "yes"},
     "(reading 'checkpoint'): 'str' object has no attribute 'get'"),
])
def test_ds_json_that_deepspeed_refuses_or_ignores_is_one_line(tmp_path, ds, problem):
    """DeepSpeed's own parser (``DeepSpeedConfig``) reads the dict the trainer will give ``deepspeed.initialize``
    in ``engine_settings``, which ``build_trainer`` calls before the model is built."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ds))
    with pytest.raises(ConfigError) as info:
        engine_settings(TrainConfig(deepspeed=str(path)))
    msg = str(info.value)
    assert msg.startswith(f"config key 'deepspeed': DeepSpeed {deepspeed.__version__} refuses {path}")
    assert msg.endswith(problem) and "\n" not in msg, msg


def _engine_jsons_in_use() -> dict:
    """Every engine JSON a run reads: the shipped ones, and each variant of the throughput benchmark."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from throughput_variants import VARIANTS, engine_json
    jsons = {p.name: json.loads(p.read_text()) for p in sorted((REPO / "ds_configs").glob("*.json"))}
    for precision in ("bf16", "fp32"):
        jsons.update({f"{v}/{precision}": engine_json({**spec, "precision": precision})
                      for v, spec in VARIANTS.items()})
    return jsons


def test_every_engine_json_in_use_passes_deepspeeds_checks(tmp_path):
    for name, ds in _engine_jsons_in_use().items():
        path = tmp_path / "ds.json"
        path.write_text(json.dumps(ds))
        cfg = TrainConfig(deepspeed=str(path))
        cfg.optim.torch_adam = "bf16" not in name
        check_with_deepspeed(build_ds_config(cfg, 1, load_universal=True), name)


def test_a_span_longer_than_a_row_and_a_blank_phase_name_are_refused(tmp_path):
    """data.span_max past a row's length was an allocation of that size (a traceback past 2**63), and a blank
    phase name passed the 'name is required' check."""
    with pytest.raises(ConfigError) as info:
        load_config(_base(tmp_path), ["--data.masking=span", "--data.seq_len=64", "--data.span_max=65"])
    assert str(info.value).startswith("config key 'data.span_max' must be at most data.seq_len=64 (a span is cut "
                                      "from one row), got 65")
    load_config(_base(tmp_path), ["--data.masking=span", "--data.seq_len=64", "--data.span_max=64"])
    with pytest.raises(ConfigError) as info:
        load_config(_base(tmp_path, phases=[{"name": "  ", "steps": 1, "lr": 1.0e-3}]))
    assert "config key 'phases[0].name' is blank ('  '); give the phase a name" in str(info.value)
