import io
import json
import tarfile

import numpy as np
import pytest
import torch

from xpt_ds.config import ConfigError, DataConfig
from xpt_ds.data import DataError, MLMBatchStream, MLMMasker, expand_shards, packed_sequences, read_documents
from xpt_ds.tokenizer import build_tokenizer


def _write_shard(path, docs, dtype=np.uint16):
    """Written by hand from docs/shard_format.md, independently of data_tools."""
    with tarfile.open(path, "w") as tar:
        for i, doc in enumerate(docs):
            buf = io.BytesIO()
            np.save(buf, np.asarray(doc, dtype=dtype))
            info = tarfile.TarInfo(f"doc-{i:08d}.ids.npy")
            info.size = buf.tell()
            buf.seek(0)
            tar.addfile(info, buf)
    return str(path)


@pytest.fixture
def tok(corpus):
    return build_tokenizer(str(corpus / "spm.model"))


def test_masking_statistics(tok):
    cfg = DataConfig(train_shards=["x"])
    ids = torch.randint(0, tok.vocab_size, (64, 512))
    ids[:, 0], ids[:, -1], ids[:, 100:110] = tok.cls_id, tok.sep_id, tok.pad_id
    out = MLMMasker(cfg, tok)(ids, torch.Generator().manual_seed(0))
    special = torch.isin(ids, torch.tensor(tok.special_ids))
    sel = torch.zeros(ids.numel(), dtype=torch.bool)
    sel[out["mlm_positions"]] = True
    sel = sel.view_as(ids)
    assert not (sel & special).any()
    assert abs(sel.sum().item() / (~special).sum().item() - 0.15) < 0.005
    assert torch.equal(out["mlm_targets"], ids.flatten()[out["mlm_positions"]])
    picked = out["input_ids"].flatten()[out["mlm_positions"]]
    masked = (picked == tok.mask_id).float().mean().item()
    unchanged = (picked == out["mlm_targets"]).float().mean().item()
    assert abs(masked - 0.8) < 0.01
    assert abs(unchanged - 0.1) < 0.01 + 1 / tok.vocab_size  # a random draw may hit the original id
    assert torch.equal(out["input_ids"][~sel], ids[~sel])  # unselected positions, specials included, untouched
    randomised = picked[(picked != tok.mask_id) & (picked != out["mlm_targets"])]
    assert not torch.isin(randomised, torch.tensor(tok.special_ids)).any()


def test_packing_is_full_length_with_separators(tmp_path, tok):
    shard = _write_shard(tmp_path / "a.tar", [list(range(10, 40)), list(range(50, 57)), list(range(60, 100))])
    seqs = list(packed_sequences([shard], 16, tok, seed=0, epoch=0))
    assert all(len(s) == 16 and s[0] == tok.cls_id and s[-1] == tok.sep_id for s in seqs)
    body = np.concatenate([s[1:-1] for s in seqs])
    stream = np.concatenate([list(range(10, 40)), [tok.sep_id], list(range(50, 57)), [tok.sep_id],
                             list(range(60, 100)), [tok.sep_id]])
    assert np.array_equal(body, stream[:len(body)]) and len(stream) - len(body) < 14


def test_stream_resume_is_exact(corpus, tok):
    cfg = DataConfig(train_shards=[f"{corpus}/manifest.json:train"], seq_len=32)
    shards = expand_shards(cfg.train_shards)
    straight = MLMBatchStream(shards, cfg, tok, micro_batch=2, rank=1, world=2)
    batches = [next(straight) for _ in range(40)]  # crosses an epoch boundary on this corpus
    assert straight.state.epoch >= 1
    for cut in (1, 17, 33):
        resumed = MLMBatchStream(shards, cfg, tok, micro_batch=2, rank=1, world=2)
        probe = MLMBatchStream(shards, cfg, tok, micro_batch=2, rank=1, world=2)
        for _ in range(cut):
            next(probe)
        resumed.load_state_dict(json.loads(json.dumps(probe.state_dict())))
        for want in batches[cut:cut + 5]:
            got = next(resumed)
            assert all(torch.equal(got[k], want[k]) for k in want)


def test_ranks_take_disjoint_slices(corpus, tok):
    cfg = DataConfig(train_shards=[f"{corpus}/manifest.json:train"], seq_len=32)
    shards = expand_shards(cfg.train_shards)
    r0 = MLMBatchStream(shards, cfg, tok, 2, rank=0, world=2)
    r1 = MLMBatchStream(shards, cfg, tok, 2, rank=1, world=2)
    one = MLMBatchStream(shards, cfg, tok, 4, rank=0, world=1)
    for _ in range(5):
        a, b, both = next(r0), next(r1), next(one)
        original = lambda x: x["input_ids"].flatten().index_put((x["mlm_positions"],), x["mlm_targets"])  # noqa: E731
        assert not torch.equal(original(a), original(b))
        assert torch.equal(torch.cat([original(a), original(b)]), original(both))


def test_corrupt_and_missing_shards_are_named(tmp_path):
    bad = tmp_path / "bad.tar"
    good = _write_shard(tmp_path / "good.tar", [list(range(5, 500))])
    bad.write_bytes(open(good, "rb").read()[:700])
    with pytest.raises(DataError, match="bad.tar"):
        list(read_documents(str(bad)))
    wrong = _write_shard(tmp_path / "wrong.tar", [np.zeros((3, 3))], dtype=np.float32)
    with pytest.raises(DataError, match="wrong.tar.*dtype"):
        list(read_documents(wrong))
    with pytest.raises(ConfigError, match="missing-000.tar"):
        expand_shards([str(tmp_path / "missing-{000..001}.tar")])
