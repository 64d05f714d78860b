"""Files others on a shared machine can read, as the umask says.

safetensors 0.8 writes every file through a temporary file that is created with mode 0600 and renamed into place,
whatever the umask (safetensors issue #782), so the weights of a model saved with ``save_pretrained`` or
``save_file`` are readable by their owner alone, while the ``config.json`` beside them follows the umask. A
fine-tuned model someone shares with their group, or serves from another account, then fails to load for everyone
else. ``as_umask`` gives such files the mode an
ordinary new file gets: ``0o666`` without the umask's bits.
"""
from __future__ import annotations

import os
from pathlib import Path


def umask() -> int:
    """The process's umask, read without changing it where Linux says it (``/proc/self/status``)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""  # not Linux
    for line in status.splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    mask = os.umask(0o077)  # elsewhere: set and restore it at once
    os.umask(mask)
    return mask


def as_umask(directory: Path, pattern: str = "*.safetensors") -> list[Path]:
    """Give the files matching ``pattern`` in ``directory`` (not below it) the mode a new file gets under the
    umask; returns them."""
    mode = 0o666 & ~umask()
    files = sorted(p for p in Path(directory).glob(pattern) if p.is_file())
    for path in files:
        os.chmod(path, mode)
    return files
