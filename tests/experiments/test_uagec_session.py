"""The decisions of launch/gpu_uagec.sh's GPU session (experiments.uagec: base, pilot, budget, pack), in-process:
the base config of a step count, the steps per phase with and without a pilot and the pilot.json that records
them, the time budget in minutes, and which sweeps' reports are rewritten before the results are packed. The
script itself runs them in test_session_steps.py (--dry-run) and test_claims.py (--pack)."""
from __future__ import annotations

import configparser
import json

import pytest
import yaml

from conftest import REPO
from xpt_ds.config import ConfigError

from experiments.uagec import base, budget, pack, pilot


def test_the_base_sets_every_phase_and_caps_its_warm_up_at_a_tenth():
    shipped = yaml.safe_load(base.CONFIG.read_text())
    for steps, warmup in ((3000, 100), (45, 4), (6, 1)):  # the GPU's cap; a rehearsal's phases (warm-up >= 1)
        cfg = base.base_config(steps)
        assert [(p["steps"], p["warmup_steps"]) for p in cfg["phases"]] == [(steps, warmup)] * len(shipped["phases"])
        # nothing else changes, and a phase keeps its keys' order (the plan reads the partial YAML as written)
        assert list(cfg["phases"][0]) == list(shipped["phases"][0])
        rest = lambda c: {**c, "phases": [{k: v for k, v in p.items() if k not in ("steps", "warmup_steps")}
                                          for p in c["phases"]]}
        assert rest(cfg) == rest(shipped)


def test_the_base_file_is_the_partial_yaml_and_a_bad_key_names_itself(tmp_path, capsys):
    path = base.write_base(6, tmp_path / "base_6.yaml")
    assert yaml.safe_load(path.read_text()) == base.base_config(6)
    assert "min_lr_ratio" not in path.read_text()  # no defaults written in: method_config tells written from unset
    bad = tmp_path / "bad.yaml"
    bad.write_text("phases:\n  - {name: p1, stepz: 3, warmup_steps: 1}\n")
    with pytest.raises(ConfigError, match="stepz"):
        base.base_config(6, bad)
    assert base.main(["0", str(tmp_path / "zero.yaml")]) == 2
    assert capsys.readouterr().err == "error: steps per phase must be positive, got 0\n"


def test_the_base_is_renamed_over_the_old_one_whole(tmp_path, monkeypatch):
    """gpu_uagec.sh's five sweeps each write the same base at once while the others read it: until the new file
    is renamed over it, a reader finds the old one whole (written in place, it could find it empty or cut short)."""
    import os
    path = tmp_path / "base_3000.yaml"
    base.write_base(3000, path)
    before = path.read_text()
    seen = []
    rename = os.replace

    def replace(src, dst):
        seen.append(open(dst).read())  # what a reader finds until the rename
        rename(src, dst)
    monkeypatch.setattr(os, "replace", replace)
    base.write_base(3000, path)
    assert seen == [before] and path.read_text() == before and list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("best, cap, steps", [
    ({"scratch": 1234, "xpt": 800}, 2000, 800),  # ceil(1.25 x 1234 / 100) x 100 / 2: the later best, in hundreds
    ({"scratch": 1234, "xpt": 800}, 500, 500),  # never past the pilot's cap
    ({"xpt": 100}, 3000, 100),
    ({"xpt": 99}, 3000, 62),  # under 100 steps the unit is one step (a rehearsal's pilot)
    ({"xpt": 3}, 6, 2),
    ({}, 6, 6),  # no best checkpoint: as if best at the end of both phases, so the cap
    ({"xpt": 0}, 6, 1),  # at least one step
])
def test_steps_from_the_pilot(best, cap, steps):
    assert pilot.steps_from_pilot(best, cap) == steps


def test_pilot_json_without_a_pilot_records_the_cap(tmp_path, capsys):
    assert pilot.main(["--work", str(tmp_path), "--pilot-steps", "0", "--phase-steps", "", "--train-seconds",
                       "150"]) == 0
    assert capsys.readouterr().out == "3000\n"  # uagec_gpu.yaml's first phase
    record = json.loads((tmp_path / "pilot.json").read_text())
    assert list(record) == ["pilot_steps_per_phase", "sweep_steps_per_phase", "rule", "train_seconds_budget"]
    assert (record["pilot_steps_per_phase"], record["sweep_steps_per_phase"], record["train_seconds_budget"]) == \
        (0, 3000, 150)
    assert record["rule"].startswith("no pilot: a cap of PHASE_STEPS per phase (default uagec_gpu.yaml's)")
    assert pilot.write_pilot(tmp_path, 0, 6, 0) == 6  # PHASE_STEPS given (the rehearsal's)
    assert pilot.write_pilot(tmp_path, 0, 0, 0) == 0  # given as 0, passed on: the base then refuses it


def test_pilot_json_from_a_pilot_reads_every_row(tmp_path):
    """A rerun's newer row of a method wins, a blank line is skipped, a row without a best checkpoint still
    counts its steps and seconds; the file is byte for byte what the script's heredoc wrote."""
    (tmp_path / "pilot").mkdir()
    rows = [{"method": "scratch", "best": {"step": 1234}, "steps_done": 1500, "train_seconds": 10.5},
            {"method": "xpt", "best": {"step": 800}, "steps_done": 1000, "train_seconds": 8}, {},
            {"method": "xpt", "steps_done": 1000, "train_seconds": 9}]
    (tmp_path / "pilot/results.jsonl").write_text("".join((json.dumps(r) if r else "") + "\n" for r in rows))
    assert pilot.write_pilot(tmp_path, 2000, None, 150) == 800
    assert (tmp_path / "pilot.json").read_text() == (
        '{\n "pilot_steps_per_phase": 2000,\n "best_step": {\n  "scratch": 1234,\n  "xpt": 800\n },\n'
        ' "steps_done": {\n  "scratch": 1500,\n  "xpt": 1000\n },\n "train_seconds": {\n  "scratch": 10.5,\n'
        '  "xpt": 9\n },\n "rule": "sweep steps per phase = ceil(1.25 x the later best step / 100) x 100 / 2 '
        '(one-phase methods: both)",\n "sweep_steps_per_phase": 800,\n "train_seconds_budget": 150\n}\n')


@pytest.mark.parametrize("seconds, decimals, text", [
    (150, None, "2.5"), (120, None, "2"), (100, None, "1.66667"), (60_000_000, None, "1000000"),
    (141, 2, "2.35"), (100, 2, "1.67"), (-50, 2, "-0.83"), (0, 2, "0.00"),
])
def test_minutes_as_awk_printed_them(seconds, decimals, text):
    assert budget.minutes(seconds, decimals) == text


def test_budget_command_takes_a_negative_budget(capsys):
    """The seconds left to start runs are negative once the budget is spent; the script still asks."""
    assert budget.main(["-50", "--decimals", "2"]) == 0
    assert capsys.readouterr().out == "-0.83\n"


def test_finished_steps_are_those_after_the_last_unpack(tmp_path):
    tsv = tmp_path / "steps.tsv"
    assert pack.finished_steps(tsv) == []  # no steps.tsv: nothing finished
    tsv.write_text("unpack\t0\t1\nsweep_main\t0\t5\npilot\t124\t3\n"  # an earlier session's
                   "unpack\t0\t0\ninstall\t1\t2\nsweep_init\t0\t4\nsweep_rewind\t124\t1\nbroken line\n"
                   "sweep_other_trelm\t0\n")
    assert pack.finished_steps(tsv) == ["unpack", "sweep_init", "sweep_other_trelm"]


def test_only_the_unfinished_sweeps_with_rows_are_rewritten(tmp_path):
    for name in ("pilot", "main", "init", "rewind"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text("")
    (tmp_path / "other_trelm").mkdir()  # no rows yet
    (tmp_path / "steps.tsv").write_text("unpack\t0\t1\npilot\t0\t60\nsweep_init\t0\t9\nsweep_main\t124\t99\n")
    assert pack.unfinished_sweeps(tmp_path) == [tmp_path / "main", tmp_path / "rewind"]
    assert [pack.step_of(s) for s in pack.SWEEPS] == ["pilot", "sweep_main", "sweep_init", "sweep_other_trelm",
                                                      "sweep_other_keep_vocab", "sweep_rewind"]


def test_a_failed_report_is_said_and_the_verdicts_still_follow(tmp_path, capsys):
    """The pilot still running, its rows corrupt: its report fails (one error line), claims.md is written all
    the same, and the command exits 0 so that the script packs."""
    (tmp_path / "pilot").mkdir()
    (tmp_path / "pilot/results.jsonl").write_text("{not json}\n")
    (tmp_path / "steps.tsv").write_text("unpack\t0\t1\n")
    assert pack.main(["--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert f"error: {tmp_path / 'pilot/results.jsonl'}:1: not a JSON row" in err
    assert err.endswith("pack: a report failed\n")
    assert "# Issue 22" in (tmp_path / "claims.md").read_text()


def test_a_step_that_raises_or_exits_is_reported_and_does_not_stop_the_packing(capsys):
    def raises(argv):
        raise KeyError("size")

    def exits(argv):
        raise SystemExit(2)

    assert pack._run("a report", raises, []) is False
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'size'" in err and err.endswith("pack: a report failed\n")
    assert pack._run("claims", exits, []) is False and capsys.readouterr().err == "pack: claims failed\n"
    assert pack._run("claims", lambda argv: 0, []) is True and capsys.readouterr().err == ""


def test_the_studies_are_not_in_the_wheel():
    """setup.cfg's package list leaves experiments/ out: a user's install holds the library, not issue 22."""
    from setuptools import find_packages
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    include = [s.strip() for s in cfg["options.packages.find"]["include"].split(",")]
    packages = find_packages(str(REPO), include=include)
    assert "xpt_ds.sweeps" in packages and not [p for p in packages if p.startswith("experiments")]
    assert "experiments.uagec" in find_packages(str(REPO))  # it is a package, left out only by the list
