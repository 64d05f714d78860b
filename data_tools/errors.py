"""The one exception ``data_tools`` raises for bad input; the CLIs print it as one ``error:`` line, exit 2."""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator


class PrepareError(ValueError):
    """Unusable input or options (missing file, invalid UTF-8, empty corpus, impossible vocab or split size)."""


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """For a CLI's ``main``: a PrepareError or OSError becomes one ``error:`` line on stderr and exit status 2."""
    try:
        yield
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        print(f"error: {e.strerror or e}{f': {e.filename}' if e.filename else ''}", file=sys.stderr)
        sys.exit(2)
