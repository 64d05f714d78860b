"""The one exception ``data_tools`` raises for bad input; the CLIs print it as one ``error:`` line, exit 2."""
from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import sys
from pathlib import Path
from typing import Iterator


class PrepareError(ValueError):
    """Unusable input or options (missing file, invalid UTF-8, empty corpus, impossible vocab or split size)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one ``error:`` line naming the command and pointing at its ``--help``, exit status
    2, instead of the whole usage (twenty lines for ``prepare``) above the line that says what was wrong."""

    def error(self, message: str):
        print(f"error: {self.prog}: {message} (`{self.prog} --help` lists the options)", file=sys.stderr)
        self.exit(2)


def first_line(e: BaseException) -> str:
    """The first non-blank line of an exception's message, or its class name when it has none."""
    return next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)


def _file_in_path(e: OSError) -> Path | None:
    """The file that stands where a directory of ``e.filename`` should be (``--out a_file/x`` said only "Not a
    directory: a_file/x/.prepare"), or None."""
    if not e.filename:
        return None
    path = Path(os.fsdecode(e.filename))
    return next((p for p in [path, *path.parents] if p.exists() and not p.is_dir()), None)


@contextlib.contextmanager
def cli_errors(out: Path | None = None) -> Iterator[None]:
    """For a CLI's ``main``: a PrepareError or OSError becomes one ``error:`` line on stderr and exit status 2.
    ``out``: the folder the command writes, named for an OSError that names no file (a full disk: a write to an
    open file)."""
    try:
        yield
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        file = _file_in_path(e) if e.errno == errno.ENOTDIR else None
        where = f": {e.filename}" if e.filename else (f" (writing under {out})" if out is not None else "")
        print(f"error: {file} is a file, not a directory{where}" if file is not None else
              f"error: {e.strerror or e}{where}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # tokenizers' and safetensors' failed writes: no OSError, "... (os error 28)"
        found = re.search(r"\(os error (\d+)\)", str(e))
        if found is None:
            raise
        where = f" (writing under {out})" if out is not None else ""
        print(f"error: {os.strerror(int(found.group(1)))}{where}", file=sys.stderr)
        sys.exit(2)
