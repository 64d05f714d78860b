"""``xpt_ds.data.shards.DocReader``: how many shard files it keeps open, and a shard replaced under it."""
import numpy as np
import pytest

from conftest import write_shard
from xpt_ds.data.shards import DataError, scan_shards


def test_a_reader_keeps_few_shards_open_and_names_one_replaced_under_it(unique_shards, monkeypatch, tmp_path):
    """A reader kept every shard it read open (one descriptor per shard per DataLoader worker: a corpus of
    thousands of shards passed the usual limit of 1,024). Now the least recently read are closed past MAX_OPEN,
    reads stay right through reopening, and a shard replaced while closed is named, not read."""
    import os
    from xpt_ds.data import shards as shards_mod
    shards, docs = unique_shards
    monkeypatch.setattr(shards_mod, "MAX_OPEN", 2)
    indexes, _ = scan_shards(shards, "fail")
    reader = shards_mod.DocReader(indexes)

    def open_shards() -> int:
        return sum(os.path.realpath(f"/proc/self/fd/{fd}") in shards for fd in os.listdir("/proc/self/fd")
                   if os.path.exists(f"/proc/self/fd/{fd}"))

    for s in [0, 1, 2, 3, 4, 0, 2, 4, 1, 3] * 2:
        for d in range(len(indexes[s].lengths)):
            ids = reader.read(s, d)
            assert np.array_equal(ids, np.arange(ids[0], ids[0] + docs[int(ids[0])]))
        assert open_shards() <= 2
    assert open_shards() == 2
    other = write_shard(tmp_path / "other.tar", [[1, 2, 3]])
    os.replace(other, shards[0])  # shard 0 is closed now (3 and 1 were read after it)
    with pytest.raises(DataError) as e:
        reader.read(0, 0)
    assert str(e.value).startswith(f"shard {shards[0]} changed during the run (")
    reader.close()
    assert open_shards() == 0
