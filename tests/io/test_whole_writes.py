"""Files written whole or not at all when the disk is full or a file-size limit is hit (here RLIMIT_FSIZE:
Python ignores SIGXFSZ, so write() raises EFBIG as it raises ENOSPC on a full disk): the earlier file stays as it
was, no temporary file is left, and the error names the file (write() and close() name none)."""
import contextlib
import errno
import json
import resource

import pytest

from xpt_ds.config import TrainConfig, save_config
from xpt_ds.finetuning.out_dir import OutDir
from xpt_ds.io.paths import write_text_atomic


@contextlib.contextmanager
def file_size_limit(nbytes: int):
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)


def test_a_text_file_keeps_its_old_text_and_the_error_names_it(tmp_path):
    """status.json, best.json and the like: "error: No space left on device" named no file."""
    path = tmp_path / "status.json"
    path.write_text("the old status\n")
    with file_size_limit(1000), pytest.raises(OSError) as info:
        write_text_atomic(path, "x" * 5000)
    assert (info.value.errno, info.value.filename) == (errno.EFBIG, str(path))
    assert path.read_text() == "the old status\n" and [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_a_run_s_config_yaml_is_never_left_cut(tmp_path):
    """It was written in place: a 1,024-byte config.yaml cut mid-line, or an empty one, and a finished run's
    rewritten by a rerun under the limit."""
    path = tmp_path / "config.yaml"
    save_config(TrainConfig(), path)
    whole = path.read_text()
    assert len(whole) > 1024
    with file_size_limit(1024), pytest.raises(OSError) as info:
        save_config(TrainConfig(seed=7), path)
    assert info.value.filename == str(path) and path.read_text() == whole
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


def test_a_start_that_changes_config_yaml_keeps_the_one_it_replaces(tmp_path):
    """A resume rewrote config.yaml and kept no copy of what ran before it (each checkpoint holds its config,
    but old checkpoints are rotated away). Two starts at one step keep both of the configs they replaced."""
    path = tmp_path / "config.yaml"
    assert save_config(TrainConfig(), path, step=0) is None  # a first start: nothing to keep
    first = path.read_text()
    assert save_config(TrainConfig(), path, step=6) is None  # unchanged: nothing kept
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]
    kept = save_config(TrainConfig(seed=7), path, step=6)
    assert kept == tmp_path / "config_history/step_00000006.yaml" and kept.read_text() == first
    second = path.read_text()
    assert "seed: 7" in second
    again = save_config(TrainConfig(seed=8), path, step=6)  # that start failed before its next checkpoint
    assert again == tmp_path / "config_history/step_00000006.1.yaml" and again.read_text() == second
    assert kept.read_text() == first and "seed: 8" in path.read_text()


def test_fine_tuning_results_that_cannot_be_written_go_to_stdout_and_out_stays_as_it_was(tmp_path, capsys):
    """The earlier results.json was moved to results.1.json first, then the write failed: OUT held no
    results.json, and the seeds' scores were lost."""
    (tmp_path / "results.json").write_text('{"seeds": [1]}\n')
    results = json.dumps({"seeds": [2], "summary": {"accuracy": 0.5}, "pad": "x" * 4000}) + "\n"
    with file_size_limit(1000), pytest.raises(OSError) as info:
        OutDir(tmp_path).finish(results)
    assert info.value.filename == str(tmp_path / "results.json") and info.value.errno == errno.EFBIG
    assert capsys.readouterr().out == results
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
    assert (tmp_path / "results.json").read_text() == '{"seeds": [1]}\n'
    OutDir(tmp_path).finish(results)  # with room: the earlier one aside, as before
    assert (tmp_path / "results.json").read_text() == results
    assert (tmp_path / "results.1.json").read_text() == '{"seeds": [1]}\n'


def test_a_write_probe_refused_its_byte_leaves_no_file(tmp_path):
    """The probe was made, then its byte refused (a full disk): an empty .write_probe_* stayed in run, --out and
    export directories."""
    from xpt_ds.io.paths import unwritable
    with file_size_limit(0):
        assert unwritable(tmp_path) == "File too large"
    assert list(tmp_path.iterdir()) == []


def test_a_rust_library_s_write_error_is_an_os_error_naming_the_file(tmp_path):
    """tokenizers and safetensors raise their write errors as other exceptions naming no file: an export onto a
    full disk was a 29-line traceback ending "Exception: No space left on device (os error 28)"."""
    from tokenizers import Tokenizer, models

    from xpt_ds.io.paths import write_error
    with file_size_limit(10), pytest.raises(Exception) as info:
        Tokenizer(models.WordLevel({f"w{i}": i for i in range(500)}, unk_token="w0")).save(str(tmp_path / "t.json"))
    error = write_error(info.value, tmp_path / "export")
    assert isinstance(error, OSError) and (error.errno, error.filename) == (errno.EFBIG, str(tmp_path / "export"))
    assert write_error(ValueError("no such thing"), tmp_path) is None
    assert write_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path).filename == str(tmp_path)
    assert write_error(FileNotFoundError(errno.ENOENT, "No such file or directory", "x"), tmp_path) is None
    assert write_error(OSError("--out x: cannot write there"), tmp_path) is None  # a message of our own stays


def test_an_export_that_cannot_be_written_is_one_line_naming_out_and_keeps_the_earlier_one(straight_runs, tmp_path,
                                                                                          capsys):
    """The weights' write named no file ("error: File too large"), and the tokenizer's was a 29-line traceback."""
    from xpt_ds.cli.export import main
    run, out = straight_runs(1) / "run", tmp_path / "export"
    assert main(["--run", str(run), "--out", str(out)]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    with file_size_limit(4096):
        assert main(["--run", str(run), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {out}: File too large"
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert list(tmp_path.iterdir()) == [out]  # no staging folder left
