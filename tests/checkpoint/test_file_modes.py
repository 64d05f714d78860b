"""Saved weights get the mode the umask gives a new file (safetensors itself writes 0600 whatever the umask)."""
import os
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from xpt_ds.io.file_modes import as_umask, umask


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_safetensors_files_get_the_umask_mode(tmp_path, mask):
    old = os.umask(mask)
    try:
        assert umask() == mask
        save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
        (tmp_path / "sub").mkdir()
        save_file({"w": torch.zeros(2)}, str(tmp_path / "sub/below.safetensors"))
        (tmp_path / "config.json").write_text("{}")
        assert as_umask(tmp_path) == [tmp_path / "model.safetensors"]
    finally:
        os.umask(old)
    assert (tmp_path / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~mask
    assert (tmp_path / "model.safetensors").stat().st_mode & 0o777 == (tmp_path / "config.json").stat().st_mode & 0o777
    assert (tmp_path / "sub/below.safetensors").stat().st_mode & 0o777 == 0o600  # only the directory named



def test_the_umask_without_proc_is_read_and_left_as_it_was(monkeypatch):
    """Where /proc/self/status cannot be read (not Linux), the umask is set and restored to read it."""
    from xpt_ds.io import file_modes

    def unreadable():
        raise FileNotFoundError("no /proc here")

    old = os.umask(0o027)
    try:
        monkeypatch.setattr(file_modes, "Path", lambda *_: SimpleNamespace(read_text=unreadable))
        assert umask() == 0o027
        assert umask() == 0o027  # unchanged by the first read
    finally:
        os.umask(old)
