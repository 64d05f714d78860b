"""A run's record of its shard scans (``xpt_ds.data.scan_records``): a later start reads it instead of scanning
again, gets the same indexes, and scans again whatever changed (the file, what is checked, a torn record); a
corrupt shard is never recorded, and the one named is the first in the paths' order whatever order the ranks of a
node scanned them in."""
from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from conftest import write_shard
from trelm_builders import write_parallel
from xpt_ds.data import parallel, scan_records, shards
from xpt_ds.data.scan_records import Records, kept, work_order
from xpt_ds.data.shards import DataError, scan_shards

VOCAB, SPECIAL = (200, "spm"), (0, 1, 2, 4)


@pytest.fixture
def paths(tmp_path):
    rng = np.random.default_rng(0)
    return [write_shard(tmp_path / f"train-{s}.tar", [rng.integers(5, 200, int(rng.integers(1, 50)))
                                                      for _ in range(int(rng.integers(2, 9)))]) for s in range(4)]


@pytest.fixture
def scans(monkeypatch):
    """The paths scan_shard and scan_pair_shard read, in order."""
    seen = []

    def counted(real):
        def scan(path, *args, **kwargs):
            seen.append(path)
            return real(path, *args, **kwargs)
        return scan
    monkeypatch.setattr(shards, "scan_shard", counted(shards.scan_shard))
    monkeypatch.setattr(parallel, "scan_pair_shard", counted(parallel.scan_pair_shard))
    return seen


def same(a, b) -> bool:
    return (a.path == b.path and a.dtype == b.dtype and a.max_id == b.max_id and a.offsets.dtype == np.int64
            and np.array_equal(a.offsets, b.offsets) and np.array_equal(a.lengths, b.lengths))


def test_a_later_start_reads_the_records_and_gets_the_same_indexes(tmp_path, paths, scans):
    plain, _ = scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    records = Records(tmp_path / "scans")
    with kept(records):
        first, _ = scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    assert scans == paths * 2 and len(list(records.directory.glob("*.npz"))) == 4
    again = Records(tmp_path / "scans")
    with kept(again):
        second, _ = scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    assert scans == paths * 2 and again.counts == {"read": 4, "scanned": 0}
    assert all(same(a, b) and same(a, c) for a, b, c in zip(plain, first, second))
    assert "4 read from" in again.summary() and "0 scanned" in again.summary()


def test_what_the_scan_checks_is_part_of_the_record(tmp_path, paths, scans):
    records = Records(tmp_path / "scans")
    with kept(records):
        scan_shards(paths, "fail", None, VOCAB, SPECIAL)
        scan_shards(paths, "fail", None, (300, "other.model"), SPECIAL)  # another tokenizer
        scan_shards(paths, "fail", None, VOCAB, (0, 1, 2, 3, 4))  # more special ids
        scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    assert scans == paths * 3
    with pytest.raises(DataError, match="the manifest records 1 / 1"), kept(records):
        scan_shards(paths, "fail", {paths[2]: (1, 1)}, VOCAB, SPECIAL)  # another manifest record


def test_a_shard_rewritten_with_its_own_bytes_and_mtime_is_scanned_again(tmp_path, paths, scans):
    with kept(Records(tmp_path / "scans")):
        scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    st = os.stat(paths[1])
    data = open(paths[1], "rb").read()
    with open(paths[1], "wb") as fh:
        fh.write(data)
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns))  # its change time cannot be set back
    assert os.stat(paths[1]).st_mtime_ns == st.st_mtime_ns
    with kept(Records(tmp_path / "scans")):
        scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    assert scans == paths + [paths[1]]


def test_a_torn_or_foreign_record_is_scanned_again(tmp_path, paths, scans):
    records = Records(tmp_path / "scans")
    with kept(records):
        want, _ = scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    files = sorted(records.directory.glob("*.npz"), key=os.path.getmtime)
    files[0].write_bytes(files[0].read_bytes()[:100])
    np.savez(files[1], meta=np.array("{}"))
    with kept(Records(tmp_path / "scans")):
        got, _ = scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    assert len(scans) == 6 and all(same(a, b) for a, b in zip(want, got))
    with kept(Records(tmp_path / "scans")):  # written again, whole
        scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    assert len(scans) == 6


def test_a_corrupt_shard_is_named_in_order_and_never_recorded(tmp_path, paths, scans, caplog):
    for bad in (paths[0], paths[2]):
        open(bad, "r+b").truncate(700)
    records = Records(tmp_path / "scans", share=(1, 2))  # scans paths 1 and 3, then 2, then 0
    with pytest.raises(DataError, match=f"corrupt shard {paths[0]}: "), kept(records):
        scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    assert scans == [paths[1], paths[3], paths[2], paths[0]]
    with kept(records):
        good, skipped = scan_shards(paths, "skip", None, VOCAB, SPECIAL)
    assert skipped == [paths[0], paths[2]] and [ix.path for ix in good] == [paths[1], paths[3]]
    assert scans[4:] == [paths[2], paths[0]] and len(list(records.directory.glob("*.npz"))) == 2


def test_a_start_that_a_corrupt_shard_stops_scans_no_shard_after_it(tmp_path, paths, scans):
    """Under on_corrupt_shard: fail, only an earlier shard can be the one named: the shards after the corrupt one
    are not scanned (a first start through a large corpus named its first corrupt shard only after scanning all)."""
    open(paths[1], "r+b").truncate(700)
    for share, want in (((0, 1), paths[:2]), ((1, 2), [paths[1], paths[0]])):
        scans.clear()
        with pytest.raises(DataError, match=f"corrupt shard {paths[1]}: "), kept(Records(tmp_path / f"s{share}", share)):
            scan_shards(paths, "fail", None, VOCAB, SPECIAL)
        assert scans == want
    scans.clear()
    with kept(Records(tmp_path / "s3", (1, 2))):  # skipped, not fatal: every shard is scanned
        good, skipped = scan_shards(paths, "skip", None, VOCAB, SPECIAL)
    assert skipped == [paths[1]] and sorted(scans) == sorted(paths) and len(good) == 3
    assert len(list((tmp_path / "s3").glob("*.npz"))) == 3  # all three good shards recorded


def test_records_that_cannot_be_written_leave_the_scans_right(tmp_path, paths, caplog):
    (tmp_path / "scans").write_text("a file")
    with kept(Records(tmp_path / "scans")), caplog.at_level(logging.WARNING):
        got, _ = scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    want, _ = scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    assert all(same(a, b) for a, b in zip(want, got))
    said = [r.getMessage() for r in caplog.records if "cannot record shard scans" in r.getMessage()]
    assert len(said) == 1 and str(tmp_path / "scans") in said[0]


def test_a_failed_first_start_leaves_no_run_directory_for_its_records(tmp_path):
    from xpt_ds.runtime.status import remove_unstarted
    run = tmp_path / "run"
    (run / scan_records.SUBDIR).mkdir(parents=True)
    (run / scan_records.SUBDIR / "0123.npz").write_bytes(b"x")
    (run / "checkpoints").mkdir()
    assert remove_unstarted(run) and not run.exists()


def test_a_record_s_temporary_file_left_by_a_killed_process_goes_after_an_hour(tmp_path):
    scans = tmp_path / scan_records.SUBDIR
    scans.mkdir()
    old, young, record = scans / ".ab.npz.123", scans / ".cd.npz.456", scans / "ab.npz"
    for f in (old, young, record):
        f.write_bytes(b"x")
    os.utime(old, (0, 0))
    os.utime(record, (0, 0))
    assert scan_records.run_records(tmp_path, True).directory == scans
    assert sorted(p.name for p in scans.iterdir()) == [".cd.npz.456", "ab.npz"]
    assert scan_records.run_records(tmp_path, False) is None


def test_a_rank_scans_its_share_then_the_others_from_their_far_end():
    assert work_order(list("abcdefg"), (1, 3)) == list("begfdca")
    assert work_order(list("abc"), (0, 1)) == list("abc")


def test_the_share_comes_from_the_launchers_local_rank_and_size(monkeypatch):
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    assert scan_records.node_share() == (0, 1)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("LOCAL_SIZE", "8")  # the deepspeed launcher's
    assert scan_records.node_share() == (3, 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # torchrun's
    assert scan_records.node_share() == (3, 4)
    monkeypatch.setenv("LOCAL_RANK", "4")
    assert scan_records.node_share() == (0, 1)


def test_parallel_shards_are_recorded_too(tmp_path, corpus_bert, scans):
    manifest, _ = write_parallel(tmp_path / "par", corpus_bert)
    paths = [str(p) for p in sorted((tmp_path / "par").glob("*.tar"))]
    want, _ = parallel.scan_pair_shards(paths, "fail", (1000, 200))
    for _ in range(2):
        with kept(Records(tmp_path / "scans")):
            got, _ = parallel.scan_pair_shards(paths, "fail", (1000, 200))
        assert all(same(getattr(a, f), getattr(b, f)) for a, b in zip(want, got) for f in ("src", "tgt", "t2s", "s2t"))
    assert scans == paths * 2


def test_a_record_renamed_to_another_key_is_not_used(tmp_path, paths, scans):
    """A record holds what it was made of: one copied under the name of other inputs (here a smaller vocabulary,
    which the shard's ids exceed) is not taken for it."""
    records = Records(tmp_path / "scans")
    with kept(records):
        scan_shards(paths[:1], "fail", None, VOCAB, SPECIAL)
    made = next(records.directory.glob("*.npz"))
    small = (100, "spm")
    other = scan_records.record_file(records.directory, scan_records.record_of(
        scan_records.identity(paths[0]), ("tokens", None, small, SPECIAL)))
    made.rename(other)
    with pytest.raises(DataError, match=">= vocab size 100"), kept(Records(tmp_path / "scans")):
        scan_shards(paths[:1], "fail", None, small, SPECIAL)


def test_records_that_cannot_be_read_are_said_once(tmp_path, paths, caplog):
    (tmp_path / "scans").write_text("a file")
    with kept(Records(tmp_path / "scans")), caplog.at_level(logging.INFO):
        scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    assert len([r for r in caplog.records if "unreadable" in r.getMessage()]) == 1


def test_records_no_rank_used_go_once_the_start_s_scans_are_done(tmp_path, paths, scans, caplog):
    """A corpus copied anew at each start (or a ``chmod -R``) is another set of files: without pruning, every start
    added a full set of records."""
    from xpt_ds.training.streams import prune_scans
    first = Records(tmp_path / "scans")
    with kept(first):
        scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    prune_scans(first, 0, 1)
    for path in paths:
        os.chmod(path, 0o600)  # a new ctime: another file to the records
    second = Records(tmp_path / "scans")
    with kept(second):
        scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    (second.directory / ".ab.npz.123").write_bytes(b"another rank's, being written")
    assert second.counts == {"read": 0, "scanned": 4} and len(list(second.directory.glob("*.npz"))) == 8
    with caplog.at_level(logging.INFO):
        prune_scans(second, 0, 1)
    assert sorted(p.name for p in second.directory.glob("*.npz")) == sorted(second.used)
    assert (second.directory / ".ab.npz.123").exists()
    assert f"4 records that no rank used at this start removed from {second.directory}" in caplog.text
    third = Records(tmp_path / "scans")
    with kept(third):
        scan_shards(paths, "fail", None, VOCAB, SPECIAL)
    assert third.counts == {"read": 4, "scanned": 0} and scans == paths * 2
    prune_scans(Records(tmp_path / "scans", share=(1, 2)), 1, 1)  # not rank 0: removes nothing
    assert len(list(second.directory.glob("*.npz"))) == 4
