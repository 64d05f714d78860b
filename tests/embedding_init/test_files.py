"""xpt_ds/embedding_init/files.py: a sidecar's malformed ``unseen_ids`` is one line naming the file, never a
traceback or a silently wrong row (numpy reads a negative id from the end)."""
from __future__ import annotations

import numpy as np
import pytest

from xpt_ds.config import ConfigError
from xpt_ds.embedding_init.files import read_matrix

IDENTITY = {"kind": "sentencepiece", "path": "spm.model", "sha256": "ab" * 32, "vocab_size": 6}


def _write(tmp_path, name: str, **meta):
    from data_tools.embeddings.embedding_files import write_embeddings
    matrix = np.ones((6, 3), np.float32)
    return write_embeddings(tmp_path / name, matrix, {"kind": "static", "tokenizer": IDENTITY, **meta})


def test_unseen_ids_mark_rows(tmp_path):
    f = read_matrix(str(_write(tmp_path, "ok", unseen_ids=[0, 5])), "path", 6, IDENTITY["sha256"], "sentencepiece")
    assert f.seen.tolist() == [False, True, True, True, True, False]
    f = read_matrix(str(_write(tmp_path, "none")), "path", 6, IDENTITY["sha256"], "sentencepiece")
    assert f.seen.all()


@pytest.mark.parametrize("unseen, fragment", [
    ([6], "holds 6, not a row id in [0, 6)"), ([-1], "holds -1"), (None, "must be a list of row ids, got null"),
    (["a"], "holds 'a'"), ([1.0], "holds 1.0"), ([True], "holds True"), ({"0": 1}, "must be a list"),
])
def test_malformed_unseen_ids_are_one_line(tmp_path, unseen, fragment):
    path = _write(tmp_path, "bad", unseen_ids=unseen)
    with pytest.raises(ConfigError) as e:
        read_matrix(str(path), "path", 6, IDENTITY["sha256"], "sentencepiece")
    msg = str(e.value)
    assert fragment in msg and "\n" not in msg and str(path.with_suffix(".npy")) in msg and "bad.json" in msg, msg
