"""xpt_ds.data.tar_index: the shard index read without tarfile gives tarfile's index, or hands the shard back.

The reference is ``scan_shard`` with the fast reader switched off (the tarfile + np.lib.format path). For every
shard below, and for hundreds of damaged copies of one, the two scans end the same way: the same index, or both
refuse it.
"""
import io
import tarfile

import numpy as np
import pytest
import webdataset as wds

from data_tools.pipeline.shards import write_shard
from xpt_ds.data import shards as shards_module
from xpt_ds.data.shards import DataError, scan_shard
from xpt_ds.data.tar_index import read_index


def _reference(path):
    saved, shards_module.read_index = shards_module.read_index, lambda path, size: None
    try:
        return scan_shard(str(path))
    finally:
        shards_module.read_index = saved


def _outcome(scan, path):
    try:
        idx = scan(path)
    except DataError as e:
        return "error", str(e)
    return "index", (idx.offsets.tolist(), idx.lengths.tolist(), str(idx.dtype), idx.max_id)


def _docs(rng, n, vocab=9000):
    return [rng.integers(5, vocab, int(rng.integers(0, 200))) for _ in range(n)]


def _tar_of(path, members, fmt=tarfile.USTAR_FORMAT):
    """``members``: (name, bytes) or (name, None) for a directory."""
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, raw in members:
            info = tarfile.TarInfo(name)
            if raw is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return path


def _npy(ids, dtype=np.uint16):
    buf = io.BytesIO()
    np.save(buf, np.asarray(ids, dtype))
    return buf.getvalue()


def _fast_and_same(path):
    size = path.stat().st_size
    assert read_index(str(path), size) is not None, f"{path.name} went to the tarfile path"
    assert _outcome(scan_shard, str(path)) == _outcome(_reference, str(path))


def test_the_writers_shards_read_the_same_as_through_tarfile(tmp_path):
    rng = np.random.default_rng(0)
    write_shard(tmp_path / "tools.tar", "train", 0, [[d] for d in _docs(rng, 40)], 9000)
    write_shard(tmp_path / "wide.tar", "train", 0, [[d] for d in _docs(rng, 5, 100_000)], 100_000)  # uint32
    with wds.TarWriter(str(tmp_path / "wds.tar")) as w:  # float mtime: a pax header before every member
        for i, ids in enumerate(_docs(rng, 30)):
            w.write({"__key__": f"w-{i:08d}", "ids.npy": ids.astype(np.uint16)})
    _tar_of(tmp_path / "long.tar", [("d" * 150 + f"{i}.ids.npy", _npy(range(5, 9 + i))) for i in range(3)],
            tarfile.PAX_FORMAT)  # a path longer than a USTAR name: in a pax header
    _tar_of(tmp_path / "mixed.tar", [("dir", None), ("a.ids.npy", _npy([7, 8])), ("a.txt", b"text"),
                                     ("b.ids.npy", _npy([])), ("c.ids.npy", _npy([9]))])
    for name in ("tools.tar", "wide.tar", "wds.tar", "long.tar", "mixed.tar"):
        _fast_and_same(tmp_path / name)
    assert _reference(tmp_path / "mixed.tar").lengths.tolist() == [2, 0, 1]


def test_other_forms_go_to_tarfile(tmp_path):
    """GNU long names, a big-endian array, a version 2 npy header: read by the tarfile path, with its outcome."""
    gnu = _tar_of(tmp_path / "gnu.tar", [("g" * 150 + ".ids.npy", _npy([5, 6]))], tarfile.GNU_FORMAT)
    big = _tar_of(tmp_path / "big.tar", [("a.ids.npy", _npy([5, 6], ">u2"))])
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.array([5, 6], np.uint16), version=(2, 0))
    v2 = _tar_of(tmp_path / "v2.tar", [("a.ids.npy", buf.getvalue())])
    for path in (gnu, big, v2):
        assert read_index(str(path), path.stat().st_size) is None
        assert _outcome(scan_shard, str(path)) == _outcome(_reference, str(path))
    assert scan_shard(str(gnu)).lengths.tolist() == [2] and scan_shard(str(v2)).lengths.tolist() == [2]
    with pytest.raises(DataError, match="big.tar.*dtype >u2"):
        scan_shard(str(big))


@pytest.mark.parametrize("writer", ["tools", "wds"])
def test_a_damaged_shard_ends_as_it_does_through_tarfile(tmp_path, writer):
    """Flipped bytes anywhere (headers, npy headers, data, the end marker), cuts and zero-filled tails: the fast
    reader never takes a shard tarfile refuses, and never reads one differently."""
    rng = np.random.default_rng(1)
    good = tmp_path / "good.tar"
    if writer == "tools":
        write_shard(good, "train", 0, [[d] for d in _docs(rng, 6, 300)], 9000)
    else:
        with wds.TarWriter(str(good)) as w:
            for i, ids in enumerate(_docs(rng, 6, 300)):
                w.write({"__key__": f"w-{i:08d}", "ids.npy": ids.astype(np.uint16)})
    raw = bytearray(good.read_bytes())
    bad = tmp_path / "bad.tar"
    with tarfile.open(good) as tar:  # where each member's tar header (and pax header, if any) starts
        members = tar.getmembers()
    headers = sorted({m.offset for m in members} | {m.offset_data - 512 for m in members})[:8]
    cases = [("flip", int(rng.integers(len(raw)))) for _ in range(150)]
    cases += [("flip", h + int(rng.integers(512))) for h in headers for _ in range(15)]  # inside the headers
    cases += [("cut", int(rng.integers(len(raw)))) for _ in range(40)] + [("zero", int(rng.integers(len(raw))))
                                                                         for _ in range(40)]
    kinds = {"index": 0, "error": 0}
    for what, at in cases:
        damaged = bytearray(raw)
        if what == "flip":
            damaged[at] ^= 1 << int(rng.integers(8))
        elif what == "cut":
            damaged = damaged[:at]
        else:
            damaged[at:] = bytes(len(damaged) - at)
        bad.write_bytes(bytes(damaged))
        fast, reference = _outcome(scan_shard, str(bad)), _outcome(_reference, str(bad))
        assert fast == reference, (what, at)
        kinds[fast[0]] += 1
    assert kinds["index"] > 50 and kinds["error"] > 50  # both outcomes were exercised
