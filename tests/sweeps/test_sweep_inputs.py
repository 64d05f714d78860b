"""What a sweep refuses before it changes anything (a second sweep on its folder, a damaged results.jsonl line,
seeds the trainer would refuse, a refused command's configs), and the report's arms: a labelled Scratch arm is
the baseline, labelled arms keep one order and colours of their own, an early stop shows in "steps run"."""
import json
import subprocess
import sys

import pytest

from xpt_ds.cli.sweep import main
from xpt_ds.errors import UserError
from xpt_ds.sweeps import report
from xpt_ds.sweeps.arms import baseline_arm, color, ordered
from xpt_ds.sweeps.plan import parse_override
from xpt_ds.sweeps.rows import read_rows


def _args(config, test_shards, out, *extra):
    return ["--config", str(config), "--methods", "xpt", "--sizes", "100", "--test-shards", *test_shards, "--out",
            str(out), *extra]


def _files(out):
    return {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".sweep.lock"}


def test_a_second_sweep_on_a_folder_in_use_is_one_line_and_changes_nothing(tmp_path, sweep_config, capsys):
    """Until 2026-12-04 a second sweep on the same folder moved the first one's live run aside (no checkpoint
    yet), trained it again beside it (the first one's trainer then died), and rewrote the arm configs the first
    one's next runs read."""
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    assert main(_args(config, test_shards, out, "--dry-run")) == 0  # writes nothing
    (out / "configs").mkdir(parents=True)
    (out / "configs/xpt.yaml").write_text("the first sweep's config\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from xpt_ds.runtime.run_lock import hold; "
         "f = hold(Path(sys.argv[1]), '.sweep.lock', 'xpt-ds sweep', 'sweep directory', '--out'); print('held', "
         "flush=True); sys.stdin.read()", str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        before = _files(out)
        capsys.readouterr()
        assert main(_args(config, test_shards, out)) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: sweep directory {out} is in use by xpt-ds sweep (pid {holder.pid} on ")
        assert err.rstrip().endswith("one job writes a sweep directory at a time (stop that one first, or give this "
                                     "one another --out)") and err.count("\n") == 1
        assert _files(out) == before
    finally:
        holder.communicate("")


def test_a_refused_command_leaves_the_arm_configs_as_they_were(tmp_path, sweep_config, capsys):
    config, test_shards = sweep_config
    out = tmp_path / "sweep"
    (out / "configs").mkdir(parents=True)
    (out / "configs/xpt.yaml").write_text("the last sweep's config\n")
    assert main(_args(config, test_shards, out, "--set", "optim.micro_batch_size=abc")) == 2
    assert "optim.micro_batch_size" in capsys.readouterr().err
    assert (out / "configs/xpt.yaml").read_text() == "the last sweep's config\n"
    assert not (out / "runs").exists()


def test_seeds_the_trainer_refuses_are_refused_before_the_first_run(tmp_path, sweep_config, capsys):
    """The seeds were not in the configs checked before the first run: every run then failed at its training."""
    config, test_shards = sweep_config
    for extra in (["--dry-run"], []):
        assert main(_args(config, test_shards, tmp_path / "sweep", "--seeds", "1", "-1", *extra)) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --seeds -1: ") and "must be >= 0" in err and err.count("\n") == 1
    assert not (tmp_path / "sweep/runs").exists() and not (tmp_path / "sweep/configs").exists()


def test_an_out_that_cannot_be_written_is_refused_by_the_dry_run_too(tmp_path, sweep_config, capsys):
    """A dry run under a file said "dry run: 1 of 1 runs would start", exit 0; it still makes nothing."""
    config, test_shards = sweep_config
    (tmp_path / "a_file").write_text("")
    for out in (tmp_path / "a_file", tmp_path / "a_file/sweep"):
        for extra in (["--dry-run"], []):
            assert main(_args(config, test_shards, out, *extra)) == 2
            assert capsys.readouterr().err == f"error: --out {out}: {tmp_path / 'a_file'} is a file, not a directory\n"
    assert main(_args(config, test_shards, tmp_path / "new/sweep", "--dry-run")) == 0
    assert not (tmp_path / "new").exists()


ROW = {"method": "xpt", "size": 100, "seed": None, "ppl": 3.0}


@pytest.mark.parametrize("line", [b"[1, 2]", b"null", b'"text"', b'{"size": 100}', b'{"method": "xpt"}',
                                  b'{"method": "x\xff", "size": 100}'])
def test_a_whole_line_that_is_no_row_is_one_line_naming_it(tmp_path, sweep_config, capsys, line):
    """JSON that is no row object, or bytes that are no UTF-8: a TypeError, KeyError or UnicodeDecodeError
    traceback from the sweep, its dry run and the report until 2026-12-04."""
    path = tmp_path / "sweep/results.jsonl"
    path.parent.mkdir()
    path.write_bytes(json.dumps(ROW).encode() + b"\n" + line + b"\n")
    with pytest.raises(UserError, match=f"^{path}:2: not a "):
        read_rows(path)
    config, test_shards = sweep_config
    assert main(_args(config, test_shards, tmp_path / "sweep", "--dry-run")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:2: not a ") and "Traceback" not in err
    assert report.main([str(tmp_path / "sweep")]) == 2


def test_a_line_separator_inside_a_row_is_text(tmp_path):
    path = tmp_path / "results.jsonl"
    row = {**ROW, "note": "a\u2028b\x85c"}
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_rows(path) == {("xpt", 100, None): row}


def _rows(methods: dict[str, str]) -> list[dict]:
    return [{"method": arm, "base_method": method, "size": size, "ppl": ppl * (1.2 if method == "scratch" else 1),
             "steps": 60, "steps_done": 60} for arm, method in methods.items()
            for size, ppl in ((100_000, 10.0), (400_000, 6.0))]


def test_a_labelled_scratch_arm_is_the_baseline():
    rows = _rows({"xpt": "xpt", "scratch_lr": "scratch"})
    assert baseline_arm(rows) == "scratch_lr" and set(report.efficiency(rows, "ppl", False)) == {"xpt"}
    assert not any("No Scratch runs" in line for line in report.efficiency_tables(rows, ["ppl"]))
    both = _rows({"xpt": "xpt", "scratch": "scratch", "scratch_lr": "scratch"})
    assert baseline_arm(both) == "scratch"  # the plain one; the labelled one is set against it
    assert set(report.efficiency(both, "ppl", False)) == {"xpt", "scratch_lr"}
    two = _rows({"xpt": "xpt", "scratch_a": "scratch", "scratch_b": "scratch"})
    assert baseline_arm(two) is None
    assert report.efficiency_tables(two, ["ppl"])[0].startswith("Several Scratch arms (scratch_a, scratch_b)")


def test_labelled_arms_keep_one_order_and_colours_of_their_own():
    """The arms of one method were sorted by a set's order (another at each PYTHONHASHSEED) and all drawn black."""
    code = ("from xpt_ds.sweeps.arms import color, ordered; rows = [{'method': m, 'base_method': b} for m, b in "
            "(('xpt_zero', 'xpt'), ('scratch', 'scratch'), ('xpt_mean', 'xpt'), ('xpt', 'xpt'), "
            "('xpt_focus', 'xpt'))]; print(ordered(rows), [color(m, rows) for m in ordered(rows)])")
    said = {subprocess.run([sys.executable, "-c", code], env={"PYTHONHASHSEED": seed}, capture_output=True,
                           text=True, check=True).stdout for seed in ("1", "2", "3")}
    assert len(said) == 1
    order = ["scratch", "xpt", "xpt_focus", "xpt_mean", "xpt_zero"]
    rows = [{"method": m, "base_method": m.split("_")[0]} for m in reversed(order)]
    assert ordered(rows) == order
    colours = [color(m, rows) for m in order]
    assert len(set(colours)) == len(colours) and "k" not in colours


def test_every_method_has_a_colour_of_its_own():
    """There are more methods than matplotlib's default cycle has colours: C10 drew the eleventh as C0, Scratch's."""
    from matplotlib.colors import to_hex
    from xpt_ds.sweeps.arms import METHOD_NAMES, color
    rows = [{"method": m} for m in METHOD_NAMES]
    colours = [to_hex(color(m, rows)) for m in METHOD_NAMES]
    assert len(METHOD_NAMES) > 10 and len(set(colours)) == len(colours), colours


def test_an_early_stop_of_one_seed_shows_in_steps_run():
    assert report._steps_run({"steps": 60, "steps_done": 59.5}) == "59.5 of 60"
    assert report._steps_run({"steps": 60, "steps_done": 59.96}) == "59.9 of 60"
    assert report._steps_run({"steps": 60, "steps_done": 60.0}) == "60 of 60"


def test_a_set_item_naming_two_arms_says_so():
    from xpt_ds.config import ConfigError
    with pytest.raises(ConfigError, match="give at most one arm and one size or size range"):
        parse_override("xpt:scratch:phases.0.lr=1e-4", ("xpt", "scratch"))
