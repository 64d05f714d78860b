"""The ``xpt-data`` command line, in-process: ``prepare --help`` shows a whole run's flags, every command's usage
names the form it was run by, and an empty input fails with one line and leaves nothing behind."""
from __future__ import annotations

import importlib
import runpy
import sys
import warnings

import pytest

from data_tools import cli
from data_tools.errors import PrepareError
from data_tools.pipeline.run import run_pipeline

FORMS = ("xpt-data", "python -m data_tools", "python -m data_tools.")  # console script, package, module


def run_main(capsys, main, *args, **kw) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a command's ``main``, whether it returns or exits (``--help``)."""
    try:
        rc = main(list(map(str, args)), **kw)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_as_module(capsys, module: str, *args) -> tuple[int, str, str]:
    """``python -m module args``, in this process: the module's own ``__main__`` block."""
    saved = sys.argv
    sys.argv = [module, *args]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module is already imported
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        rc = 0
    except SystemExit as e:
        rc = e.code
    finally:
        sys.argv = saved
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_prepare_help_lists_every_flag_of_a_whole_run_and_the_stages(capsys):
    """`xpt-data prepare --help` listed the stages only; the flags the README uses needed `prepare all --help`."""
    for args in (["prepare", "--help"], ["prepare", "-h"]):
        rc, out, _ = run_main(capsys, cli.main, *args)
        assert rc == 0 and out.startswith("usage: xpt-data prepare [-h] --out OUT"), out[:200]
        assert all(f in out for f in ("--input", "--vocab-size", "--family", "--workers", "--shard-tokens",
                                      "--hf-tokenizer", "--no-dedupe")), out
        assert "stages: all|clean|split|spm|tokenize (default all); `xpt-data prepare STAGE --help`" in out
        assert "xpt-data prepare tokenize --out DIR" in out  # the stage examples of the module's docstring
    rc, out, _ = run_main(capsys, cli.main, "prepare", "split", "--help")  # a stage still lists its own flags
    assert rc == 0 and out.startswith("usage: xpt-data prepare split") and "--valid" in out and "--input" not in out
    rc, out, err = run_main(capsys, cli.main, "prepare")
    assert rc == 2 and not out and "--vocab-size" in err
    rc, _, err = run_main(capsys, cli.main, "prepare", "--out", "o")
    assert rc == 2 and err == ("error: xpt-data prepare: the following arguments are required: --input (`xpt-data "
                               "prepare --help` lists the options)\n")


@pytest.mark.parametrize("form", FORMS)
def test_every_command_names_the_form_it_was_run_by(capsys, form):
    """`xpt-data uagec --help` showed `python -m data_tools.cli.uagec` examples, and `python -m data_tools.cli.uagec
    --help` an `xpt-data uagec` usage: the usage line and every command the help names now read as invoked."""
    for name, (module, _) in cli.COMMANDS.items():
        if form == "python -m data_tools.":
            rc, out, err = run_as_module(capsys, module, "--help")
            prog, other = f"python -m {module}", ("xpt-data ", "python -m data_tools ")
        else:
            if form == "xpt-data":
                rc, out, err = run_main(capsys, cli.main, name, "--help")
            else:
                rc, out, err = run_as_module(capsys, "data_tools", name, "--help")
            prog, other = f"{form} {name}", ("python -m data_tools." if form == "xpt-data" else "xpt-data ",)
        assert rc == 0 and out.startswith(f"usage: {prog} "), (name, out[:200], err[-500:])
        assert not any(o in out for o in other), (name, out)
    rc, out, _ = run_main(capsys, cli.main, "--help")
    assert rc == 0 and all(f"\n  {name} " in out for name in cli.COMMANDS)
    rc, _, err = run_main(capsys, cli.main, "bogus")
    assert rc == 2 and err.strip() == f"error: unknown command 'bogus'; valid: {', '.join(cli.COMMANDS)}"


@pytest.mark.parametrize("text", ["", "\n\n   \n\t\n"], ids=["0-byte", "blank-lines"])
def test_an_empty_input_fails_with_one_line_and_leaves_nothing_behind(tmp_path, capsys, text):
    """It left a 0-byte OUT/.prepare/lock and an empty OUT/sentences/; now the folders the run made go with the
    lock, and what was there before stays."""
    empty, blank = tmp_path / "empty.txt", tmp_path / "also.txt"
    empty.write_text(text)
    blank.write_text("\n")
    prepare = importlib.import_module("data_tools.cli.prepare").main
    for stage in ([], ["clean"]):
        out = tmp_path / "new" / "deeper" / "out"
        rc, _, err = run_main(capsys, prepare, *stage, "--input", empty, blank, "--out", out, "--quiet")
        assert rc == 2 and err == f"error: empty input: no text in {empty}, {blank}\n", err
        assert sorted(tmp_path.iterdir()) == [blank, empty], list(tmp_path.rglob("*"))
    kept = tmp_path / "kept"  # an existing folder, with an empty sentences/ of its own: both stay
    (kept / "sentences").mkdir(parents=True)
    rc, _, err = run_main(capsys, prepare, "--input", empty, "--out", kept, "--quiet")
    assert rc == 2 and [p.relative_to(kept).as_posix() for p in kept.rglob("*")] == ["sentences"]
    with pytest.raises(PrepareError, match=f"empty input: no text in {empty}"):  # the library call as well
        run_pipeline([empty], tmp_path / "lib")
    assert not (tmp_path / "lib").exists()


def test_a_failed_run_keeps_an_existing_lock_and_finished_stages(tmp_path, capsys):
    """Only what the failing run made goes: a lock and stage records of an earlier run stay."""
    out = tmp_path / "out"
    (out / ".prepare").mkdir(parents=True)
    (out / ".prepare" / "lock").touch()
    (out / ".prepare" / "spm.json").write_text("{}")
    empty = tmp_path / "empty.txt"
    empty.touch()
    prepare = importlib.import_module("data_tools.cli.prepare").main
    rc, _, err = run_main(capsys, prepare, "--input", empty, "--out", out)
    assert rc == 2 and err.endswith(f"error: empty input: no text in {empty}\n")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [".prepare", ".prepare/lock",
                                                                            ".prepare/spm.json"]


def test_a_gguf_file_given_as_a_tokenizer_directory_is_named_as_such(tmp_path):
    """``prepare --hf-tokenizer X.gguf`` said "directory not found" for a file that is there (a review on
    2026-12-04 followed docs/decoders.md's continued-pretraining recipe with a GGUF source)."""
    import pytest

    from data_tools.errors import PrepareError
    from data_tools.piece_tokenizers import HfTokenizer
    gguf = tmp_path / "model.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(PrepareError, match=r"model\.Q4_1\.gguf is a \.gguf file, not a Hugging Face tokenizer "
                                           r"directory or hub id: write it to a directory first"):
        HfTokenizer(str(gguf))


def test_a_rust_library_s_failed_write_is_one_error_line(tmp_path, capsys):
    """extend-vocab's tokenizer save onto a full disk was a traceback ending "Exception: No space left on device
    (os error 28)": tokenizers raises no OSError. A real tokenizer's save under a file-size limit here."""
    import resource

    from tokenizers import Tokenizer, models

    from data_tools.errors import cli_errors
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    with pytest.raises(SystemExit) as info, cli_errors(tmp_path):
        resource.setrlimit(resource.RLIMIT_FSIZE, (10, old[1]))
        try:
            Tokenizer(models.WordLevel({f"w{i}": i for i in range(500)}, unk_token="w0")).save(str(tmp_path / "t"))
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, old)
    assert info.value.code == 2
    assert capsys.readouterr().err == f"error: File too large (writing under {tmp_path})\n"
    with pytest.raises(ValueError, match="^a bug$"), cli_errors(tmp_path):
        raise ValueError("a bug")  # any other exception stays a traceback


def test_a_file_where_out_needs_a_directory_is_named(tmp_path, capsys):
    """``prepare --out a_file/x`` said "error: Not a directory: a_file/x/.prepare", naming neither the file nor
    what was wrong with it."""
    text, file = tmp_path / "in.txt", tmp_path / "a_file"
    text.write_text("hello world\n")
    file.write_text("mine")
    prepare = importlib.import_module("data_tools.cli.prepare").main
    for out in (file, file / "x"):
        rc, _, err = run_main(capsys, prepare, "--input", text, "--out", out, "--quiet")
        assert rc == 2 and err == f"error: {file} is a file, not a directory: {out / '.prepare'}\n", err
    assert file.read_text() == "mine" and sorted(tmp_path.iterdir()) == [file, text]
