"""A repository laid out in a Hugging Face cache as huggingface_hub lays one out, for the tests that read a hub id
from the cache (``HF_HUB_CACHE``, with ``HF_HUB_OFFLINE`` set)."""
from __future__ import annotations

import shutil
from pathlib import Path


def cache_repo(hub: Path, repo: str, model_dir: Path, leave_out=()) -> Path:
    """``repo`` in a Hugging Face cache at ``hub``, laid out as huggingface_hub lays one out: refs/main naming a
    snapshot that holds ``model_dir``'s files but ``leave_out``; the snapshot directory."""
    entry = hub / f"models--{repo.replace('/', '--')}"
    snapshot = entry / "snapshots" / "0123abc"
    shutil.copytree(model_dir, snapshot, ignore=lambda _, names: [n for n in names if n in leave_out])
    (entry / "refs").mkdir()
    (entry / "refs/main").write_text("0123abc")
    return snapshot
