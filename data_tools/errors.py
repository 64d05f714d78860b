"""The one exception ``data_tools`` raises for bad input; the CLIs print it as one ``error:`` line, exit 2."""
from __future__ import annotations


class PrepareError(ValueError):
    """Unusable input or options (missing file, invalid UTF-8, empty corpus, impossible vocab or split size)."""
