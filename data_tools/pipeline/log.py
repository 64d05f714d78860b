"""Log lines and progress bars of ``data_tools.cli.prepare``, on stderr; ``set_quiet(True)`` silences both."""
from __future__ import annotations

import sys

_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def log(msg: str, prefix: str = "prepare") -> None:
    if not _quiet:
        print(f"{prefix}: {msg}", file=sys.stderr, flush=True)


def progress_bar(enabled: bool | None, **kw):
    """A tqdm bar on stderr: ``enabled`` None shows it only on a terminal; always off when quiet."""
    from tqdm import tqdm
    return tqdm(file=sys.stderr, disable=(None if enabled is None else not enabled) if not _quiet else True,
                mininterval=0.5, dynamic_ncols=True, **kw)
