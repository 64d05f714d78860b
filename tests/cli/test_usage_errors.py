"""A command line argparse refuses (an unknown flag, a missing or malformed value) is one ``error:`` line naming the
command and pointing at its ``--help``, exit status 2, for every command of ``xpt-ds`` and ``xpt-data``: not the
whole usage (twenty lines for ``prepare``) above the line that says what was wrong."""
import pytest

from data_tools import cli as data_cli
from xpt_ds import cli as xpt_cli

CASES = ([(xpt_cli, name, f"xpt-ds {name}", ["--no-such-flag=1" if name != "train" else "--config"])
          for name in xpt_cli.COMMANDS]
         + [(data_cli, name, f"xpt-data {name}", ["--no-such-flag"]) for name in data_cli.COMMANDS]
         + [(data_cli, "prepare", "xpt-data prepare split", ["split", "--out", "o", "--valid"])])


@pytest.mark.parametrize("cli,name,prog,args", CASES, ids=[f"{c[1]}:{' '.join(c[3])}" for c in CASES])
def test_a_refused_command_line_is_one_error_line(capsys, cli, name, prog, args):
    try:
        rc = cli.main([name, *args])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    assert rc == 2 and out.out == "", out
    assert out.err.count("\n") == 1 and out.err.startswith(f"error: {prog}: "), out.err
    assert out.err.endswith(f"(`{prog} --help` lists the options)\n"), out.err


def test_help_still_prints_the_usage(capsys):
    with pytest.raises(SystemExit) as e:
        data_cli.main(["prepare", "split", "--help"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("usage: xpt-data prepare split")
