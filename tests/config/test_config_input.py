"""Config input that was taken wrongly: command-line values inside free-form options and lists the file leaves
out, values no run can use (validate), a YAML key given twice, and DeepSpeed JSON sections of the wrong shape."""
import pytest
import yaml

from xpt_ds.config import ConfigError, load_config
from xpt_ds.config.manager import config_yaml, read_config_file
from xpt_ds.training.engine import load_ds_config


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
    ("--model.adapter_size=-4", "config key 'model.adapter_size' must be >= 1, got -4"),
    ("--model.adapter_size=0", "config key 'model.adapter_size' must be >= 1, got 0"),
    ("--logging.eval_batches=-1", "config key 'logging.eval_batches' must be >= 0"),
    ("--logging.eval_every=-5", "config key 'logging.eval_every' must be >= 0"),
    ("--guard.loss_spike_ratio=nan", "config key 'guard.loss_spike_ratio' must be > 1 (or 0 = off), got nan"),
    ("--guard.early_stop_min_delta=nan", "config key 'guard.early_stop_min_delta' must be a finite number >= 0"),
    ("--data.mask_replace_prob=nan", "config keys 'data.mask_*' must satisfy"),
    ("--logging.peak_tflops=nan", "config key 'logging.peak_tflops' must be a finite number >= 0"),
])
def test_values_no_run_can_use_are_refused(tmp_path, override, message):
    with pytest.raises(ConfigError) as info:
        load_config(_base(tmp_path), ["--model.method=adapters", override])
    assert str(info.value).startswith(message), str(info.value)


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
