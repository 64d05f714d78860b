"""``config.validate`` reports every problem of a config at once, one ``error:`` line each, and exits 2; a single
problem reads as it always did; a check whose premise already failed says nothing more."""
import copy

import pytest

from conftest import base_config, write_config
from xpt_ds.cli import main
from xpt_ds.config import ConfigError, TrainConfig, from_dict, validate
from xpt_ds.config.validate import problems

THREE = ["error: config key 'model.itl_init' is 'zero'; valid: random, copy",
         "error: config key 'data.seq_len' must be >= 8, got 4",
         "error: config key 'optim.grad_accum' must be >= 1, got 0"]


def _config(tmp_path, **changes) -> dict:
    """A runnable config whose paths need not exist (no check here reads a file); ``changes``: dotted key -> value."""
    cfg = base_config(tmp_path / "run", tmp_path / "source", tmp_path / "corpus")
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        d = cfg
        for k in path:
            d = d[int(k)] if isinstance(d, list) else d.setdefault(k, {})
        d[int(last) if isinstance(d, list) else last] = value
    return cfg


def _problems(tmp_path, **changes) -> list[str]:
    return problems(from_dict(TrainConfig, copy.deepcopy(_config(tmp_path, **changes))))


@pytest.mark.parametrize("print_config", [False, True], ids=["train", "print-config"])
def test_three_problems_are_three_error_lines_and_status_2(tmp_path, capsys, print_config):
    """``xpt-ds train`` (the real entry point, in-process): three unrelated problems, each its own line in the
    order of the checks, before anything is built or written."""
    path = write_config(tmp_path / "cfg.yaml", _config(tmp_path, **{"model.itl_init": "zero", "data.seq_len": 4,
                                                                   "optim.grad_accum": 0}))
    assert main(["train", "--config", str(path), *(["--print-config"] if print_config else [])]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.splitlines() == THREE, out.err
    assert not (tmp_path / "run").exists()


def test_a_single_problem_is_the_one_line_it_always_was(tmp_path, capsys):
    path = write_config(tmp_path / "cfg.yaml", _config(tmp_path, **{"optim.grad_accum": 0}))
    assert main(["train", "--config", str(path)]) == 2
    assert capsys.readouterr().err == "error: config key 'optim.grad_accum' must be >= 1, got 0\n"
    with pytest.raises(ConfigError) as info:
        validate(from_dict(TrainConfig, _config(tmp_path, **{"optim.grad_accum": 0})))
    assert str(info.value) == "config key 'optim.grad_accum' must be >= 1, got 0"


def test_a_sweep_names_the_arm_on_every_line(tmp_path, capsys):
    """``xpt-ds sweep`` checks each arm's config (``build_plan``) before any run and prints the error through
    ``cli_errors``, as its ``main`` does (called here without the runner, whose imports take 7 s): each problem is
    a line that names the arm and size."""
    from xpt_ds.errors import cli_errors
    from xpt_ds.cli.sweep import parse_args
    from xpt_ds.sweeps.plan import build_plan
    path = write_config(tmp_path / "base.yaml", _config(tmp_path))
    args = parse_args(["--config", str(path), "--methods", "xpt", "--sizes", "100", "--out", str(tmp_path / "s"),
                       "--test-shards", "t.tar", "--set", "data.seq_len=4", "optim.grad_accum=0"])
    assert cli_errors(build_plan)(args) == 2
    where = "error: arm 'xpt' (model.method xpt), size 100: "
    assert capsys.readouterr().err.splitlines() == [where + line.removeprefix("error: ") for line in THREE[1:]]


@pytest.mark.parametrize("changes, expected", [
    ({"model.method": "nope", "model.itl_init": "copy", "model.head_bias_init": "unigram",
      "data.parallel_shards": ["p.tar"], "phases.0.objectives": ["cdlm_en_x"]},  # each asks what the method does
     ["config key 'model.method' is 'nope'; valid: "]),
    ({"phases.0.name": "", "phases.1.name": "", "phases.1.start_from": ""},  # no duplicates, no start to check
     ["config key 'phases[0].name' is required", "config key 'phases[1].name' is required"]),
    ({"phases.1.name": "phase1", "phases.1.start_from": "phase1"},  # which phase1 it starts from is moot
     ["config key 'phases' has duplicate names: ['phase1', 'phase1']"]),
    ({"phases.0.steps": 0}, ["config key 'phases[0].steps' must be > 0, got 0"]),  # warmup_steps: 1 is no problem
    ({"model.method": "scratch", "model.embedding_init": "bogus"},  # not also "scratch cannot use it"
     ["config key 'model.embedding_init' is 'bogus'; valid: "]),
    ({"data.train_shards": []},  # not also "phases[0].objectives has 'mlm_target', which reads data.train_shards"
     ["config key 'data.train_shards' is empty"]),
    ({"model.method": "xpt_sp", "data.parallel_shards": ["p.tar"]},  # not also "no phase's objectives list cdlm"
     ["config key 'data.parallel_shards' is set but model.method 'xpt_sp' reads no parallel data"]),
    ({"data.masking": "huh", "data.span_p": 0.5},  # not also "span_p is set but data.masking is 'huh'"
     ["config key 'data.masking' is 'huh'; valid: "]),
    ({"optim.betas": [0.9, 0.99, 2.0]}, ["config key 'optim.betas' must have 2 values"]),
    ({"activations.checkpoint_every": -1, "compile": True},
     ["config key 'activations.checkpoint_every' must be >= 0 (0 = off), got -1"]),
    ({"guard.early_stop_patience": -1, "guard.early_stop_rewind": True},
     ["config key 'guard.early_stop_patience' must be >= 0 (0 = off), got -1"]),
], ids=["unknown-method", "unnamed-phases", "duplicate-names", "bad-steps", "unknown-init", "no-train-shards",
        "parallel-shards", "unknown-masking", "three-betas", "negative-checkpoint-every", "negative-patience"])
def test_a_check_whose_premise_failed_says_nothing_more(tmp_path, changes, expected):
    found = _problems(tmp_path, **changes)
    assert len(found) == len(expected) and all(f.startswith(e) for f, e in zip(found, expected)), found


@pytest.mark.parametrize("changes, expected", [
    ({"checkpoint.rescale_timeout_minutes": 0},
     "config key 'checkpoint.rescale_timeout_minutes' must be a finite number > 0, got 0.0"),
    ({"checkpoint.rescale_timeout_minutes": float("inf")},
     "config key 'checkpoint.rescale_timeout_minutes' must be a finite number > 0, got inf"),
    ({"guard.collective_timeout_s": -1},
     "config key 'guard.collective_timeout_s' must be a finite number >= 0 (0 = DeepSpeed's default), got -1.0"),
], ids=["rescale-zero", "rescale-inf", "collective-negative"])
def test_the_timeouts_are_finite_and_not_negative(tmp_path, changes, expected):
    assert _problems(tmp_path, **changes) == [expected]


@pytest.mark.parametrize("changes, expected", [
    ({"model.method": "extend"}, "model.method 'extend' has no two-phase preset whose phase 1 it widens (it applies "
                                 "to xpt, xpt_no_itl, random_source; in a sweep, scope it: --set xpt:"),
    ({"model.method": "lora"}, "model.method 'lora' has no two-phase preset whose phase 1 it widens"),
    ({"phases.0.trainable": ["@new"]}, "phases[0].trainable lists its own patterns, which it does not widen; add "
                                       "'@position' and '@lm_head' to them instead"),
], ids=["extend", "lora", "own-patterns"])
def test_the_phase1_extra_flag_where_it_widens_nothing_is_a_problem(tmp_path, changes, expected):
    """model.phase1_trains_position_and_head: true beside a method or a phase 1 that it does not widen did
    nothing, without a word (a review found it on 2026-12-04); with xpt's preset it is no problem."""
    flag = {"model.phase1_trains_position_and_head": True}
    assert _problems(tmp_path, **flag) == []
    # a phase 1 that trains them anyway: a one-phase method (a sweep's scratch arm), or patterns that name them
    assert _problems(tmp_path, **flag, **{"model.method": "scratch", "phases": [{"name": "all", "steps": 4,
                                                                                  "lr": 1e-3}]}) == []
    assert _problems(tmp_path, **flag, **{"phases.0.trainable": ["@new", "@position", "@lm_head"]}) == []
    found = _problems(tmp_path, **flag, **changes)
    assert len(found) == 1 and found[0].startswith("config key 'model.phase1_trains_position_and_head' is true, "
                                                   f"but {expected}"), found
