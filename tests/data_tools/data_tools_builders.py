"""What the data-tools tests share: ``cli``, one ``python -m data_tools.cli.*`` command in a fresh interpreter."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO


def cli(*args, module="data_tools.cli.prepare", env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)
