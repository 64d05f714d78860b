"""The tokenizer a checkpoint or an export holds (``xpt_ds.data.tokenizer.saved_tokenizer``), which ``evaluate
--run``, ``probe`` and ``export`` read: a damaged one is one line naming the directory that holds it, not the
config key ``model.tokenizer``, which named no file of it."""
from __future__ import annotations

import pytest

from xpt_ds.config import ConfigError
from xpt_ds.data.tokenizer import saved_tokenizer


def test_a_damaged_spm_model_names_the_checkpoint(tmp_path):
    tag_dir = tmp_path / "checkpoints" / "global_step000000006"
    tag_dir.mkdir(parents=True)
    (tag_dir / "spm.model").write_text("garbage\n")
    with pytest.raises(ConfigError) as info:
        saved_tokenizer(tag_dir)
    line = str(info.value)
    assert line.startswith(f"{tag_dir}: its spm.model is not a SentencePiece model (") and "\n" not in line
    assert "model.tokenizer" not in line and "copy it from another checkpoint of the run" in line
