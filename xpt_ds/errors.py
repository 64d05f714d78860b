"""The errors a user can fix, and how every command reports them: one ``error:`` line per problem, exit status 2.

Every exception for bad input (a config key, a shard, a checkpoint, a model directory, a fine-tuning file)
subclasses ``UserError``; its message names the culprit and fits on one line, except a config's ConfigError,
which lists every problem of the config a line each (``xpt_ds.config.validate``). ``cli_errors`` (a decorator of
every command's ``main``) turns a UserError or an OSError (a file the checks did not foresee) into those lines.
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Callable


INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as a shell reports a Ctrl-C


class UserError(Exception):
    """Bad input; the message names the key, file or flag and fits on one line."""


def os_error_line(e: OSError) -> str:
    """An OSError as one line that names the file: 'PATH: No such file or directory'."""
    if e.filename is None:
        return e.strerror or str(e)
    if e.filename2 is None:
        return f"{e.filename}: {e.strerror or e}"
    return f"{e.filename} -> {e.filename2}: {e.strerror or e}"


def no_file(path: str | Path, what: str, spec: bool = False) -> str:
    """The error for an input file ``what`` at ``path`` that ``is_file()`` says is not there: missing, or a
    directory (its "not found" read as a typo); ``spec``: the path came from a shard spec, where a prepared
    corpus's directory is given as its manifest and split."""
    p = Path(path)
    if not p.is_dir():
        return f"{what} not found: {path}"
    corpus = (f" (a prepared corpus: give {p / 'manifest.json'}:SPLIT)" if spec and (p / "manifest.json").is_file()
              else "")
    return f"{what} {path} is a directory, not a file{corpus}"


def first_line(e: Exception, prefer: str = "") -> str:
    """The line of ``e``'s message that holds ``prefer`` (when given), else its first non-blank line, else its
    type's name: a library's multi-line message as part of one error line."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return next((ln for ln in lines if prefer and prefer in ln), lines[0] if lines else type(e).__name__)


def error_line(e: Exception) -> str:
    return os_error_line(e) if isinstance(e, OSError) else str(e)


def error_lines(e: Exception) -> str:
    """``error: MESSAGE``, one such line for each line of ``e``'s message: each of a config's problems stands alone
    (a grep for ``^error:`` finds them all), and a one-line message reads as it always did."""
    return "\n".join(f"error: {line}" for line in error_line(e).splitlines() or [""])


def say(line: str) -> None:
    """One write per message (a line, or a config's lines together): every rank may report the same error, and
    two ranks' lines must not interleave."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one ``error:`` line naming the command and pointing at its ``--help``, exit status
    2, instead of the whole usage (twenty lines for some commands) above the line that says what was wrong."""

    def error(self, message: str):
        say(f"error: {self.prog}: {message} (`{self.prog} --help` lists the options)")
        self.exit(2)


def cli_errors(main: Callable[..., int]) -> Callable[..., int]:
    """Decorator of every command's ``main(argv) -> int``: a UserError or OSError becomes ``error:`` lines on
    stderr (one per problem, ``error_lines``) and exit status 2, a Ctrl-C one ``interrupted`` line and status 130,
    with no traceback."""
    @functools.wraps(main)
    def run(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except (UserError, OSError) as e:
            say(error_lines(e))
            return 2
        except KeyboardInterrupt:
            say("interrupted")
            return INTERRUPTED_EXIT_CODE
    return run
