"""What the shard scan finds before training: corrupt parallel shards (skipped like target shards with
data.on_corrupt_shard: skip, the pair stream still resuming exactly), ids outside a vocabulary and links outside
their side in parallel shards; and a shard that breaks after the scan still ends a DataLoader worker with one
line naming it."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from conftest import SOURCE_VOCAB
from trelm_builders import trelm_stream, trelm_train_config, write_pairs, write_parallel
from xpt_ds.config import DataConfig
from xpt_ds.data.mlm import MLMBatchStream, MLMMasker, build_stream
from xpt_ds.data.parallel import scan_pair_shard
from xpt_ds.data.shards import DataError, document_extrema, scan_shard
from xpt_ds.data.tokenizer import build_tokenizer


def _shards(manifest, split: str = "train") -> list:
    return [manifest.parent / s for s in json.loads(manifest.read_text())["splits"][split]["shards"]]


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_document_extrema_are_every_documents_min_and_max(corpus):
    for shard in _shards(corpus / "manifest.json"):
        ix = scan_shard(str(shard))
        with open(shard, "rb") as fh:
            docs = []
            for off, n in zip(ix.offsets, ix.lengths):
                fh.seek(int(off))
                docs.append(np.frombuffer(fh.read(int(n) * ix.dtype.itemsize), ix.dtype))
        lo, hi = document_extrema(str(shard), ix.offsets, ix.lengths, ix.dtype)
        assert lo.tolist() == [int(d.min()) for d in docs] and hi.tolist() == [int(d.max()) for d in docs]
        assert ix.max_id == max(hi)


def test_a_corrupt_parallel_shard_fails_or_is_skipped_and_the_pairs_resume_exactly(tmp_path, source_dir,  # noqa: F811
                                                                                 corpus_bert):
    manifest, corpus = write_parallel(tmp_path / "par", corpus_bert)  # 40 pairs, 15 per shard: 3 shards
    bad = _shards(manifest)[1]
    bad.write_bytes(bad.read_bytes()[:1500])
    with pytest.raises(DataError, match=f"corrupt parallel shard {bad}: "):
        trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, manifest))
    cfg = trelm_train_config(tmp_path, source_dir, corpus_bert, manifest, on_corrupt_shard="skip")
    straight = trelm_stream(cfg)
    assert straight.corpus.skipped == [str(bad)] and len(straight.corpus) == 40 - 15
    batches = [next(straight) for _ in range(15)]  # 15 x 2 pairs: past the first epoch of 25 pairs
    good = {(s.tobytes(), t.tobytes()) for k in (*range(15), *range(30, 40)) for s, t in [(corpus.src[k],
                                                                                         corpus.tgt[k])]}
    first = [straight.corpus.pair(k) for k in range(25)]
    assert {(s.astype(corpus.src[0].dtype).tobytes(), t.astype(corpus.tgt[0].dtype).tobytes())
            for s, t, _ in first} == good  # every pair of the two readable shards once per epoch
    again = trelm_stream(cfg)
    again.load_state_dict({"sequences": 8, "pairs": 8})
    for want in batches[4:]:
        assert _equal(next(again), want)


def test_a_changed_byte_in_a_parallel_shard_is_found_by_its_manifests_sha256(tmp_path, source_dir,  # noqa: F811
                                                                           corpus_bert):
    """data_tools.cli.parallel records every shard's sha256 (``files``): a source id changed to another in-vocabulary id
    passes every other check, and the scan finds it by the digest."""
    from xpt_ds.io.digest import sha256_file
    manifest, _ = write_parallel(tmp_path / "par", corpus_bert)
    meta = json.loads(manifest.read_text())
    meta["files"] = {p.name: sha256_file(p) for p in _shards(manifest)}  # as data_tools.pairs.build writes it
    manifest.write_text(json.dumps(meta))
    assert trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, manifest)).corpus.skipped == []
    bad = _shards(manifest)[1]
    src = scan_pair_shard(str(bad)).src
    with open(bad, "r+b") as f:  # its first pair's first source id becomes another ordinary id
        f.seek(int(src.offsets[0]))
        first = int(np.frombuffer(f.read(src.dtype.itemsize), src.dtype)[0])
        f.seek(int(src.offsets[0]))
        f.write(np.array([6 if first != 6 else 7], src.dtype).tobytes())
    with pytest.raises(DataError) as e:
        trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, manifest))
    digest = meta["files"][bad.name]
    assert str(e.value).startswith(f"corrupt parallel shard {bad}: its sha256 is not the {digest[:12]}")
    assert scan_pair_shard(str(bad)).src.lengths.size == 15  # without the digest the shard reads as a good one


def _bad_pairs(tmp_path, corpus_bert, what: str, value: int):
    """Parallel shards (3 of them) whose pair 20 (the second shard's pair 5) holds ``value`` in ``what``."""
    from data_tools.pairs.parallel_shards import AlignedCorpus
    _, corpus = write_parallel(tmp_path / "ok", corpus_bert)
    arrays = {k: [a.copy() for a in getattr(corpus, k)] for k in ("src", "tgt", "s2t", "t2s")}
    arrays[what][20][0] = value
    return write_pairs(tmp_path / "bad", corpus_bert, AlignedCorpus(**arrays, docs=corpus.docs))


@pytest.mark.parametrize("what,value,message", [
    ("src", SOURCE_VOCAB + 7, f"pair 5 holds source id {SOURCE_VOCAB + 7} >= the source vocab size {SOURCE_VOCAB}"),
    ("tgt", 250, "pair 5 holds target id 250 >= the target vocab size 200"),
    ("t2s", 99, "pair 5 holds t2s link 99 outside the source side"),
    ("s2t", -3, "pair 5 holds s2t link -3 outside the target side")])
def test_parallel_ids_and_links_are_checked_by_the_scan(tmp_path, source_dir, corpus_bert, what, value,  # noqa: F811
                                                         message):
    manifest = _bad_pairs(tmp_path, corpus_bert, what, value)
    bad = _shards(manifest)[1]
    with pytest.raises(DataError) as e:
        trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, manifest))  # no batch read yet
    assert str(e.value) == f"corrupt parallel shard {bad}: {message}"
    stream = trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, manifest, on_corrupt_shard="skip"))
    assert stream.corpus.skipped == [str(bad)] and len(stream.corpus) == 25
    assert scan_pair_shard(str(bad)).src.lengths.size == 15  # the headers alone are fine


@pytest.mark.parametrize("what,value,side", [("src", 4, "source"), ("src", 0, "source"), ("tgt", 4, "target"),
                                             ("tgt", 3, "target")])
def test_a_special_id_in_a_parallel_shard_is_found_by_the_scan(tmp_path, source_dir, corpus_bert,  # noqa: F811
                                                               what, value, side):
    """xpt-data parallel wrote a special token spelled in the text ("[MASK]", "</s>") as its id, and the scan
    checked ids against the vocabulary size only: a mask or sep inside a pair's side reached CdLM rows as that
    role. Refused as scan_shard refuses it in a target shard (one line naming the shard, the pair and the id;
    skipped under on_corrupt_shard: skip); unk stays allowed."""
    manifest = _bad_pairs(tmp_path, corpus_bert, what, value)
    bad = _shards(manifest)[1]
    with pytest.raises(DataError) as e:
        trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, manifest))
    assert str(e.value).startswith(f"parallel shard {bad} (pair 5) holds {side} special token id {value}: ")
    assert "\n" not in str(e.value)
    stream = trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, manifest, on_corrupt_shard="skip"))
    assert stream.corpus.skipped == [str(bad)]
    unk = _bad_pairs(tmp_path / "unk", corpus_bert, what, 1)
    assert trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, unk)).corpus.skipped == []


def test_a_shard_cut_after_the_scan_ends_a_worker_with_one_line(tmp_path, corpus):
    """The scan read the shard whole; cut afterwards, a DataLoader worker's read names it in one line."""
    shard = tmp_path / "train.tar"
    shutil.copyfile(_shards(corpus / "manifest.json")[0], shard)
    tok = build_tokenizer(str(corpus / "spm.model"))
    cfg = DataConfig(train_shards=[str(shard)], seq_len=32, num_workers=2)
    stream = MLMBatchStream(build_stream([str(shard)], cfg, tok), MLMMasker(cfg, tok), 2, 0, 1, 2)
    shard.write_bytes(shard.read_bytes()[:2048])
    with pytest.raises(DataError) as e:
        for _ in range(100):
            next(stream)
    stream.close()
    assert str(e.value).startswith(f"corrupt shard {shard}: document ") and "\n" not in str(e.value)



def test_a_trelm_run_skips_and_counts_a_corrupt_parallel_shard(tmp_path, source_dir, corpus_bert):  # noqa: F811
    from conftest import base_config, launch, read_metrics, write_config
    manifest, _ = write_parallel(tmp_path / "par", corpus_bert)
    bad = _shards(manifest)[2]
    bad.write_bytes(bad.read_bytes()[:3000])
    cfg = base_config(tmp_path / "run", source_dir, corpus_bert,
                      phases=[{"name": "all", "steps": 2, "lr": 1e-3, "warmup_steps": 1}])
    cfg["model"]["method"] = "trelm"
    cfg["data"].update(parallel_shards=[f"{manifest}:train"], parallel_micro_batch=2, num_workers=0,
                       on_corrupt_shard="skip")
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"skipped 1 corrupt parallel shard(s) of 3: {bad}" in proc.stderr
    assert read_metrics(tmp_path / "run")[2]["data/skipped_shards"] == 1


def _check_streams(rank: int, store: str, problem: str | None, skipped: list[str], layouts: dict, out) -> None:
    import torch.distributed as dist

    from xpt_ds.training.guards import check_streams_agree
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        check_streams_agree(None if problem is None else DataError(problem), skipped, layouts)
        out.put((rank, None))
    except DataError as e:
        out.put((rank, str(e)))
    finally:
        dist.destroy_process_group()


LAYOUTS = {"a.tar": (4, 100, "0f"), "b.tar": (3, 90, "1e")}


@pytest.mark.parametrize("rank1", [(None, ["b.tar", "a.tar"], LAYOUTS), (None, ["a.tar"], LAYOUTS),
                                   ("x.tar: truncated", [], {}), (None, ["a.tar", "b.tar"],
                                                                  {**LAYOUTS, "b.tar": (3, 91, "2d")})],
                         ids=["same", "different", "one-rank-failed", "another-copy"])
def test_ranks_whose_streams_differ_stop_together(tmp_path, rank1):
    """Skipped shards and each shard's layout compared across ranks; a rank that could not build its streams (a
    file that differs on its node) stops the others with its line, at once, instead of leaving them in the next
    collective; a shard read differently on one rank (its node's copy differs) stops them all, naming it."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_check_streams, args=(r, str(tmp_path / "store"), *args, out))
             for r, args in enumerate([(None, ["a.tar", "b.tar"], LAYOUTS), rank1])]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    if rank1[0] is not None:
        assert results == {0: "rank 1 could not build its data streams: x.tar: truncated", 1: "x.tar: truncated"}
    elif rank1[2] != LAYOUTS:
        want = ("shard b.tar reads differently on rank 1 (3 documents, 91 tokens) than on rank 0 (3 documents, 90 "
                "tokens): every rank must read the same files")
        assert results[0] == results[1] and results[0].startswith(want), results
    elif len(rank1[1]) == 2:
        assert results == {0: None, 1: None}
    else:
        want = "ranks skipped different corrupt shards: rank 0 skipped ['a.tar', 'b.tar'], rank 1 skipped ['a.tar']"
        assert results[0] == results[1] and results[0].startswith(want), results


def test_the_layout_the_ranks_compare_covers_every_shard_a_run_reads(tmp_path, source_dir, corpus_bert):  # noqa: F811
    """shard_layouts names the target, validation and parallel shards of a TreLM run, each with its scan's
    documents and tokens; another copy of a shard under the same name (a node's other version of the corpus,
    no manifest record to check it against) has another layout."""
    from xpt_ds.data.shards import layout
    from xpt_ds.training.guards import shard_layouts
    manifest, _ = write_parallel(tmp_path / "par", corpus_bert)
    trelm = trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, manifest))
    tok = build_tokenizer(str(corpus_bert / "spm.model"))
    valid_shards = _shards(corpus_bert / "manifest.json", "valid")
    cfg = DataConfig(train_shards=[str(s) for s in valid_shards], seq_len=32, num_workers=0)
    valid = MLMBatchStream(build_stream([str(s) for s in valid_shards], cfg, tok), MLMMasker(cfg, tok), 2, 0, 1, 0)
    got = shard_layouts(trelm, valid, None)
    train = [str(s) for s in _shards(corpus_bert / "manifest.json")]
    assert set(got) == {*train, *map(str, valid_shards), *map(str, _shards(manifest))}
    idx = scan_shard(train[0])
    assert got[train[0]] == layout(idx) and got[train[0]][:2] == (len(idx.lengths), idx.tokens)
    pair = scan_pair_shard(str(_shards(manifest)[0]))
    assert got[str(_shards(manifest)[0])][:2] == (len(pair.src.lengths), sum(i.tokens for i in
                                                                             (pair.src, pair.tgt, pair.t2s, pair.s2t)))
    other = tmp_path / "other" / "train.tar"  # the validation shard's bytes under a training shard's name
    other.parent.mkdir()
    shutil.copyfile(valid_shards[0], other)
    assert layout(scan_shard(str(other))) != layout(idx)
