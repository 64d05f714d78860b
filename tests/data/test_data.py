from dataclasses import replace

import numpy as np
import pytest
import torch

from conftest import write_shard
from data_builders import BIG_VOCAB, data_config, original_ids
from xpt_ds.config import ConfigError, DataConfig
from xpt_ds.data.manifest import expand_shards
from xpt_ds.data.mlm import MLMBatchStream, MLMMasker, build_stream, build_streams, shuffle_buffer
from xpt_ds.data.shards import DataError, first_special, scan_shard, scan_shards
from xpt_ds.data.tokenizer import build_tokenizer

# A tokenizer stand-in with a large id space, so every test document can be made of ids unique to it.
def test_masking_statistics(corpus):
    tok = build_tokenizer(str(corpus / "spm.model"))
    ids = torch.randint(0, tok.vocab_size, (64, 512))
    ids[:, 0], ids[:, -1], ids[:, 100:110] = tok.cls_id, tok.sep_id, tok.pad_id
    out = MLMMasker(DataConfig(), tok)(ids, list(range(64)))
    special = torch.isin(ids, torch.tensor(tok.special_ids))
    sel = torch.zeros(ids.numel(), dtype=torch.bool)
    sel[out["mlm_positions"]] = True
    sel = sel.view_as(ids)
    assert not (sel & special).any()
    assert abs(sel.sum().item() / (~special).sum().item() - 0.15) < 0.005
    assert torch.equal(out["mlm_targets"], ids.flatten()[out["mlm_positions"]])
    picked = out["input_ids"].flatten()[out["mlm_positions"]]
    assert abs((picked == tok.mask_id).float().mean().item() - 0.8) < 0.01
    assert abs((picked == out["mlm_targets"]).float().mean().item() - 0.1) < 0.01 + 1 / tok.vocab_size
    assert torch.equal(out["input_ids"][~sel], ids[~sel])  # unselected positions, specials included, untouched
    randomised = picked[(picked != tok.mask_id) & (picked != out["mlm_targets"])]
    assert not torch.isin(randomised, torch.tensor(tok.special_ids)).any()
    again = MLMMasker(DataConfig(), tok)(ids[5:7], [5, 6])  # a sequence's mask depends on its seed only
    assert torch.equal(again["input_ids"], out["input_ids"][5:7])


def test_shuffle_buffer_is_a_seeded_permutation():
    ids = np.arange(1000)
    a = shuffle_buffer(ids, 50, np.random.default_rng(1))
    assert sorted(a) == list(ids) and not np.array_equal(a, ids)
    assert np.array_equal(a, shuffle_buffer(ids, 50, np.random.default_rng(1)))
    assert np.abs(a - ids).max() < 1000  # local shuffle: an item leaves at most ~buffer positions early
    assert np.array_equal(shuffle_buffer(ids, 1, np.random.default_rng(1)), ids)


def _streaming_shuffle(ids, size, rng):
    """The shuffle buffer's definition, one item at a time (xpt_ds's own until 2026-12-04)."""
    if size <= 1 or len(ids) <= 1:
        return ids
    out, buf = np.empty_like(ids), ids[:size].copy()
    draws = rng.random(max(0, len(ids) - size))
    for j, x in enumerate(ids[size:]):
        i = int(draws[j] * len(buf))
        out[j], buf[i] = buf[i], x
    out[len(ids) - len(buf):] = rng.permutation(buf)
    return out


@pytest.mark.parametrize("n, size", [(0, 5), (1, 5), (7, 2), (300, 7), (300, 299), (300, 300), (300, 1000),
                                     (5000, 1), (5000, 64), (20000, 2), (90000, 70000)])
def test_shuffle_buffer_is_the_streaming_shuffle_item_for_item(n, size):
    """Without the Python loop, the same order from the same draws (a run's data order, so its resume, depends on
    it), and the generator left where the loop leaves it; 70000 > 2**16: the slots are not uint16."""
    ids = np.random.default_rng(n).permutation(n).astype(np.int64) + 3
    for seed in range(3):
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        assert np.array_equal(shuffle_buffer(ids, size, a), _streaming_shuffle(ids, size, b))
        assert a.random() == b.random()


def test_stream_is_documents_with_separators_in_epoch_order(unique_shards):
    shards, docs = unique_shards
    stream = build_stream(shards, data_config(shards), BIG_VOCAB)
    for epoch in (0, 1):
        order, _ = stream.layout(epoch)
        want = np.concatenate([np.r_[stream.reader.read(int(stream.doc_shard[d]), int(stream.doc_local[d])), 2]
                               for d in order])
        got = stream.tokens(epoch * stream.epoch_tokens, (epoch + 1) * stream.epoch_tokens)
        assert np.array_equal(got, want)
    assert not np.array_equal(stream.layout(0)[0], stream.layout(1)[0])  # epochs re-shuffle
    no_sep = build_stream(shards, data_config(shards, doc_separator=False), BIG_VOCAB)
    assert no_sep.epoch_tokens == sum(docs.values()) and 2 not in no_sep.tokens(0, no_sep.epoch_tokens)


@pytest.mark.parametrize("workers", [0, 2])
def test_every_document_exactly_once_per_epoch_over_ranks_and_workers(unique_shards, workers):
    shards, docs = unique_shards
    cfg = data_config(shards)
    world, B = 2, 3
    streams = [MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB), B, r, world, workers)
               for r in range(world)]
    body = cfg.seq_len - 2
    epoch_tokens = streams[0].stream.epoch_tokens
    seen, seq_ids = [], []
    while streams[0].sequences * body < epoch_tokens - world * B * body:  # whole batches inside epoch 0
        for s in streams:
            batch = next(s)
            seq_ids += batch["seq_ids"].tolist()
            seen.append(original_ids(batch)[:, 1:-1].flatten())
    seen = torch.cat(seen)
    assert sorted(seq_ids) == list(range(len(seq_ids)))
    ids, counts = torch.unique(seen[seen >= 10], return_counts=True)
    assert counts.max() == 1  # no document token twice
    covered = set(ids.tolist())
    complete = [d for d, n in docs.items() if all(t in covered for t in range(d, d + n))]
    assert len(complete) >= len(docs) - 2 * world * B  # only the unfinished tail of the epoch is missing
    for s in streams:
        s.stream.reader.close()


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("cut", [1, 5, 9])
def test_resume_gives_identical_batches(unique_shards, workers, cut):
    shards, _ = unique_shards
    cfg = data_config(shards)

    def make(w):
        return MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB), 2, 1, 2, w)

    straight = make(0)
    want = [next(straight) for _ in range(cut + 6)]  # crosses shard and epoch boundaries on this corpus
    first = make(workers)
    for _ in range(cut):
        next(first)
    resumed = make(workers)
    resumed.load_state_dict(first.state_dict())
    for w in want[cut:]:
        got = next(resumed)
        assert all(torch.equal(got[k], w[k]) for k in w)


def test_rescaled_world_continues_without_gaps(unique_shards):
    shards, _ = unique_shards
    cfg = data_config(shards)
    two = [MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB), 2, r, 2, 0) for r in range(2)]
    used = [i for _ in range(3) for s in two for i in next(s)["seq_ids"].tolist()]
    one = MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB), 2, 0, 1, 0)
    one.load_state_dict(two[0].state_dict())
    used += [i for _ in range(3) for i in next(one)["seq_ids"].tolist()]
    assert sorted(used) == list(range(18))


def test_resume_at_another_seq_len_continues_at_the_token_it_stopped(unique_shards, caplog):
    """A 16 -> 24 schedule: the state counts sequences, so without the saved length the longer sequences would
    start at 6 * 22 instead of 6 * 14 tokens (skipping 48); the first new sequence starts at the first boundary at or
    after token 84, and nothing is read twice."""
    shards, _ = unique_shards
    short = MLMBatchStream(build_stream(shards, data_config(shards), BIG_VOCAB), MLMMasker(data_config(shards), BIG_VOCAB), 2, 0, 1, 0)
    seen = [next(short)["seq_ids"].tolist() for _ in range(3)]
    assert seen[-1] == [4, 5] and short.state_dict() == {"sequences": 6, "seq_len": 16}
    cfg = data_config(shards, seq_len=24)
    long = MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB), 2, 0, 1, 0)
    assert torch.equal(torch.from_numpy(long.stream.tokens(0, 300)), torch.from_numpy(short.stream.tokens(0, 300)))
    with caplog.at_level("WARNING"):
        long.load_state_dict(short.state_dict())
    assert long.sequences == 4  # ceil(6 * 14 / 22): token 88
    assert "data.seq_len 16 -> 24: the data stream stopped at token 84 (sequence 6) and continues at token 88" in \
        caplog.text
    batch = next(long)
    assert batch["seq_ids"].tolist() == [4, 5]
    assert original_ids(batch)[0, 1:23].tolist() == long.stream.tokens(88, 110).tolist()
    long.load_state_dict({"sequences": 4, "seq_len": 24})  # the same length: taken as it is
    assert long.sequences == 4


def test_single_pass_covers_every_token_once(unique_shards):
    shards, docs = unique_shards
    cfg = data_config(shards)
    world = 2
    streams = [MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB), 3, r, world, 0, single_pass=True)
               for r in range(world)]
    batches = [list(s) for s in streams]
    assert len(batches[0]) == len(batches[1])  # every rank takes the same number of steps (ZeRO-3 safe)
    seen = torch.cat([original_ids(b).flatten() for bs in batches for b in bs])
    assert sorted(seen[seen >= 10].tolist()) == [t for d, n in docs.items() for t in range(d, d + n)]
    last = batches[1][-1]
    assert "attention_mask" in last and torch.equal(last["attention_mask"], (last["input_ids"] != BIG_VOCAB.pad_id).long())
    assert (last["attention_mask"].sum(1) >= 2).all()  # no row is all padding: SDPA would give NaN rows


def test_corrupt_shards_are_named_or_skipped(tmp_path, unique_shards):
    shards, _ = unique_shards
    data = open(shards[1], "rb").read()
    cut = tmp_path / "cut.tar"
    for n in (700, 1024, 1500, len(data) - 10240):
        cut.write_bytes(data[:n])
        with pytest.raises(DataError, match="cut.tar"):
            scan_shard(str(cut))
    wrong = write_shard(tmp_path / "wrong.tar", [np.zeros((3, 3))], dtype=np.float32)
    with pytest.raises(DataError, match="wrong.tar.*dtype"):
        scan_shard(wrong)
    good, skipped = scan_shards([shards[0], str(cut), wrong], "skip")
    assert [g.path for g in good] == [shards[0]] and skipped == [str(cut), wrong]
    with pytest.raises(DataError, match="cut.tar"):
        scan_shards([shards[0], str(cut)], "fail")
    with pytest.raises(ConfigError, match="missing-000000.tar"):
        expand_shards([str(tmp_path / "missing-{000000..000001}.tar")])


def test_ids_outside_the_vocabulary_are_found_by_the_scan(unique_shards):
    """The scan reads every shard's largest id, so a shard with an id outside the vocabulary fails (or is skipped)
    when the stream is built, not when a batch reads it."""
    shards, docs = unique_shards
    maxima = [scan_shard(s).max_id for s in shards]
    assert maxima == sorted(maxima) and maxima[-1] == max(b + n - 1 for b, n in docs.items())
    small = replace(BIG_VOCAB, vocab_size=maxima[-2] + 1)  # only the last shard holds ids outside it
    with pytest.raises(DataError) as e:
        build_stream(shards, data_config(shards), small)
    assert str(e.value).startswith(f"shard {shards[-1]} (document ") and \
        f"holds token id {maxima[-1]} >= vocab size {maxima[-2] + 1} of <test>" in str(e.value)
    stream = build_stream(shards, data_config(shards, on_corrupt_shard="skip"), small)
    assert stream.skipped == [shards[-1]] and [i.path for i in stream.indexes] == shards[:-1]
    assert stream.tokens(0, stream.epoch_tokens).max() < small.vocab_size


def test_a_special_id_in_a_shard_is_corruption(tmp_path, unique_shards):
    """Shards hold text only: a mask id (a literal "[MASK]" a tokenizer matched, a flipped byte) or a pad, cls or
    sep id fails the scan naming the shard and document, or is skipped; unk is text."""
    shards, _ = unique_shards
    docs = [np.array([10, 11, 12]), np.array([13, BIG_VOCAB.unk_id, 14]), np.array([15, BIG_VOCAB.mask_id, 16])]
    bad = write_shard(tmp_path / "special.tar", docs)
    with pytest.raises(DataError) as e:
        build_stream([shards[0], bad], data_config([shards[0], bad]), BIG_VOCAB)
    assert str(e.value).startswith(f"shard {bad} (document 2) holds special token id {BIG_VOCAB.mask_id}: shards hold text")
    stream = build_stream([shards[0], bad], data_config([shards[0], bad], on_corrupt_shard="skip"), BIG_VOCAB)
    assert stream.skipped == [bad]
    assert scan_shard(bad).max_id == 16  # without the tokenizer's special ids, the scan does not look
    ok = write_shard(tmp_path / "unk.tar", docs[:2])
    assert build_stream([ok], data_config([ok]), BIG_VOCAB).skipped == []
    empty = write_shard(tmp_path / "empty.tar", [np.array([], np.int64)] * 2)  # nothing to look at: no error
    assert scan_shards([empty], "fail", forbidden=BIG_VOCAB.not_in_shards)[0][0].max_id == -1
    raw = tmp_path / "odd.bin"  # data not on an element boundary of the file: read document by document
    raw.write_bytes(b"x" + np.array([20, 21, 22, 23, BIG_VOCAB.pad_id], np.uint16).tobytes())
    offsets, lengths = np.array([1, 7]), np.array([3, 2])
    assert first_special(str(raw), offsets, lengths, np.dtype(np.uint16), BIG_VOCAB.not_in_shards) == (1, BIG_VOCAB.pad_id)
    assert first_special(str(raw), offsets[:1], lengths[:1], np.dtype(np.uint16), BIG_VOCAB.not_in_shards) is None


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_the_special_id_search_finds_the_first_document_for_any_ids(tmp_path, dtype):
    """uint16 shards are searched through a table of every uint16, uint32 ones id by id: ids a dtype cannot hold
    (XLM-R's mask 250001 in a uint16 shard) find nothing, and never fail."""
    rng = np.random.default_rng(0)
    docs = [rng.integers(10, 60000, 50) for _ in range(6)]
    docs[3][7], docs[5][0] = 5, 7
    shard = write_shard(tmp_path / "s.tar", docs, dtype=dtype)
    idx = scan_shard(shard)
    for ids, want in [((5, 7), (3, 5)), ((7, 250001), (5, 7)), ((250001,), None), ((0, 1, 2), None),
                      ((int(docs[0][0]),), (0, int(docs[0][0])))]:
        assert first_special(shard, idx.offsets, idx.lengths, idx.dtype, ids) == want, ids
    if dtype == np.uint32:
        wide = write_shard(tmp_path / "w.tar", [np.array([10, 20]), np.array([30, 250001])], dtype=dtype)
        w = scan_shard(wide)
        assert first_special(wide, w.offsets, w.lengths, w.dtype, (0, 250001)) == (1, 250001)


def test_an_out_of_vocabulary_id_in_a_manifest_shard_is_corruption_and_all_skipped_is_named(unique_shards):
    """A shard its manifest lists was made with the run's tokenizer (the manifest's sha256 was checked), so an id
    outside the vocabulary there is a changed byte, not another tokenizer; and when every shard is skipped the
    error names them instead of 'no documents in shards []'."""
    shards, _ = unique_shards
    maxima = [scan_shard(s).max_id for s in shards]
    small = replace(BIG_VOCAB, vocab_size=maxima[0])  # every shard holds an id outside it
    counts = {s: (len(scan_shard(s).lengths), scan_shard(s).tokens) for s in shards}
    with pytest.raises(DataError, match="its manifest records this tokenizer, so the shard's bytes changed"):
        build_stream(shards, data_config(shards), small, expected=counts)
    with pytest.raises(DataError, match="it was made with another tokenizer, or is corrupt$"):
        build_stream(shards, data_config(shards), small)
    with pytest.raises(DataError) as e:
        build_stream(shards, data_config(shards, on_corrupt_shard="skip"), small)
    assert str(e.value).startswith("every shard is corrupt and was skipped (data.on_corrupt_shard: skip") and \
        shards[0] in str(e.value)


# data.train_tokens: every training epoch is the same fixed subset of N tokens, nested across N.

SEP = BIG_VOCAB.sep_id


def _epoch(stream, e):
    return stream.tokens(e * stream.epoch_tokens, (e + 1) * stream.epoch_tokens)


def _doc_tokens(ids):
    """Document tokens only (the test documents use ids >= 10; 2 is the separator)."""
    return ids[ids >= 10]


def test_each_epoch_is_exactly_n_tokens_of_the_same_subset(unique_shards):
    shards, _ = unique_shards
    cfg = data_config(shards)
    stream = build_stream(shards, cfg, BIG_VOCAB, max_tokens=157)
    assert stream.epoch_tokens == 157
    epochs = [_epoch(stream, e) for e in range(4)]
    assert all(len(ids) == 157 for ids in epochs)
    first = sorted(epochs[0].tolist())
    assert all(sorted(ids.tolist()) == first for ids in epochs[1:])  # the same tokens, separators included
    assert any(not np.array_equal(epochs[0], ids) for ids in epochs[1:])  # in a re-shuffled order
    assert len(set(_doc_tokens(epochs[0]).tolist())) == len(_doc_tokens(epochs[0]))  # no token twice in an epoch


def test_smaller_subsets_are_prefixes_of_larger_ones(unique_shards):
    shards, docs = unique_shards
    cfg = data_config(shards)
    total = build_stream(shards, cfg, BIG_VOCAB).epoch_tokens
    sizes = [23, 60, 61, 140, total - 5, total]
    subsets = [set(_doc_tokens(_epoch(build_stream(shards, cfg, BIG_VOCAB, max_tokens=n), 0)).tolist()) for n in sizes]
    for small, large in zip(subsets, subsets[1:]):
        assert small < large
    assert subsets[-1] == {t for d, n in docs.items() for t in range(d, d + n)}
    for n, subset in zip(sizes, subsets):  # a cut document keeps its head: within a document, a prefix
        for d, length in docs.items():
            held = [t for t in range(d, d + length) if t in subset]
            assert held == list(range(d, d + len(held))), (n, d)
    other = build_stream(shards, data_config(shards, seed=1), BIG_VOCAB, max_tokens=60)
    assert set(_doc_tokens(_epoch(other, 0)).tolist()) != subsets[1]  # the order belongs to data.seed


def test_the_whole_corpus_is_the_uncapped_stream(unique_shards):
    shards, _ = unique_shards
    cfg = data_config(shards)
    full = build_stream(shards, cfg, BIG_VOCAB)
    capped = build_stream(shards, cfg, BIG_VOCAB, max_tokens=full.epoch_tokens)
    for e in range(3):
        assert np.array_equal(capped.layout(e)[0], full.layout(e)[0])
        assert np.array_equal(_epoch(capped, e), _epoch(full, e))
    with pytest.raises(ConfigError, match="data.train_tokens"):
        build_stream(shards, cfg, BIG_VOCAB, max_tokens=full.epoch_tokens + 1)


def test_exactly_once_per_epoch_across_ranks_and_resume(unique_shards):
    shards, _ = unique_shards
    cfg = data_config(shards)
    n, world, B, body = 98, 2, 3, cfg.seq_len - 2  # 98 = 7 sequences: epochs end mid-sequence and mid-batch

    def make(rank, workers=0):
        return MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB, max_tokens=n), MLMMasker(cfg, BIG_VOCAB), B, rank, world,
                              workers)

    streams = [make(r) for r in range(world)]
    steps = 5  # 5 * 2 * 3 sequences * 14 tokens = 420 tokens > 4 epochs of 98
    rows = {}
    for _ in range(steps):
        for s in streams:
            batch = next(s)
            rows.update(zip(batch["seq_ids"].tolist(), original_ids(batch)[:, 1:-1]))
    assert sorted(rows) == list(range(steps * world * B))
    stream = torch.cat([rows[i] for i in sorted(rows)]).numpy()
    epochs = len(stream) // n
    ref = sorted(_epoch(streams[0].stream, 0).tolist())
    for e in range(epochs):
        assert sorted(stream[e * n:(e + 1) * n].tolist()) == ref
    assert streams[0].epoch == steps * world * B * body // n

    resumed = make(1, workers=2)
    resumed.load_state_dict({"sequences": 2 * world * B})
    again = make(1)
    for _ in range(2):
        next(again)
    for _ in range(3):
        got, want = next(resumed), next(again)
        assert all(torch.equal(got[k], want[k]) for k in want)


def test_validation_is_untouched(tmp_path, unique_shards):
    shards, _ = unique_shards
    valid = [write_shard(tmp_path / "valid-000000.tar", [np.arange(60000 - 40 * i, 60000 - 40 * i + 30)
                                                         for i in range(1, 6)])]
    cfg = data_config(shards, valid_shards=valid, train_tokens=50, num_workers=0)
    train, val = build_streams(cfg, BIG_VOCAB, micro_batch=2, rank=0, world=1)
    assert train.stream.epoch_tokens == 50
    assert val.stream.epoch_tokens == 5 * 31
    seen = torch.cat([original_ids(b).flatten() for b in val])
    assert sorted(_doc_tokens(seen).tolist()) == sorted(t for i in range(1, 6)
                                                       for t in range(60000 - 40 * i, 60000 - 40 * i + 30))


@pytest.mark.parametrize("causal", [False, True])
def test_exported_tokenizer_reads_a_mask_as_training_masks(tmp_path, corpus, corpus_text, causal):
    """Text with the mask token in place of one piece gives the ids training makes by masking that piece: no
    "▁" after the mask (SentencePiece prepends it only at the start of a text, not after a special token)."""
    import sentencepiece as spm
    from transformers import AutoTokenizer

    from xpt_ds.data.tokenizer import save_hf_tokenizer
    tok = build_tokenizer(str(corpus / "spm.model"))
    save_hf_tokenizer(tok, tmp_path, model_max_length=64, token_types=1, causal=causal)
    hf = AutoTokenizer.from_pretrained(tmp_path)
    sp = spm.SentencePieceProcessor(model_file=str(corpus / "spm.model"))
    mask = sp.id_to_piece(tok.mask_id)
    checked = 0
    for line in [x for x in corpus_text.read_text(encoding="utf-8").splitlines() if x][:12]:
        ids = sp.encode(line)
        assert hf(line, add_special_tokens=False)["input_ids"] == ids
        if tok.unk_id in ids:  # pieces are joined back into text below: an unknown character has no piece
            continue
        pieces = sp.id_to_piece(ids)
        for i, piece in enumerate(pieces):
            if "▁" in (piece, pieces[i - 1] if i else None):  # a bare word start: no text tells a mask of it
                continue  # (or of the piece after it) from a mask of the whole word
            text = "".join(p.replace("▁", " ") if j != i else (" " if p.startswith("▁") else "") + mask
                           for j, p in enumerate(pieces)).strip()
            assert hf(text, add_special_tokens=False)["input_ids"] == ids[:i] + [tok.mask_id] + ids[i + 1:], text
            checked += 1
    assert checked > 100


def test_a_corpus_of_no_tokens_is_named(tmp_path):
    """Empty documents without separators: an epoch of no tokens is refused at the build, for training and for a
    validation pass alike (as a corpus of no documents is), not a ZeroDivisionError at the first batch."""
    shards = [write_shard(tmp_path / "train-000000.tar", [[], []])]
    cfg = data_config(shards, doc_separator=False)
    with pytest.raises(ConfigError, match=r"^no tokens in shards \[.*train-000000.tar'\]: every document is empty "
                                          r"and config key 'data.doc_separator' is false$"):
        build_stream(shards, cfg, BIG_VOCAB)
    with pytest.raises(ConfigError, match="^no tokens in shards"):
        build_streams(data_config(shards, valid_shards=shards, doc_separator=False), BIG_VOCAB, 2, 0, 1)
    s = MLMBatchStream(build_stream(shards, data_config(shards), BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB), 2, 0, 1, 0)
    assert (original_ids(next(s))[:, 1:-1] == BIG_VOCAB.sep_id).all()  # with separators: rows of separators


def _hf_decoder_tokenizer(tmp_path, pad, spare=False):
    """A decoder's Hugging Face tokenizer <s> </s> <unk> w0..w19 ([extra] too if ``spare``) that pads with ``pad``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from xpt_ds.data.tokenizer import build_hf_tokenizer
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": 3 + i for i in range(20)}}
    if spare:
        vocab["[extra]"] = 23
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    hf = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                 pad_token=pad, additional_special_tokens=["[extra]"] if spare else [])
    out = tmp_path / f"{pad.strip('<>/')}{'-spare' if spare else ''}"
    hf.save_pretrained(str(out))
    return build_hf_tokenizer(str(out), causal=True)


@pytest.mark.parametrize("pad", ["<s>", "<unk>"])
def test_next_token_targets_when_the_pad_is_bos_or_unk(tmp_path, pad):
    """A decoder tokenizer that pads with bos or unk and has no other special token keeps that pad; every row still
    predicts each token up to its appended eos, the last row's padding included, and never the padding."""
    from xpt_ds.data.causal import NextTokenTargets
    tok = _hf_decoder_tokenizer(tmp_path, pad)
    assert tok.pad_id == {"<s>": tok.cls_id, "<unk>": tok.unk_id}[pad]
    short, full = [5, 6, tok.unk_id, 7], [5, tok.sep_id, 6, tok.unk_id, 7, 8]  # a document ends inside a row
    rows = torch.tensor([[tok.cls_id, *short, tok.sep_id, tok.pad_id, tok.pad_id], [tok.cls_id, *full, tok.sep_id]])
    out = NextTokenTargets(tok)(rows, [0, 1])
    assert out["mlm_targets"].tolist() == short + full
    assert out["mlm_positions"].tolist() == [*range(len(short)), *range(8, 8 + len(full))]


@pytest.mark.parametrize("pad", ["<s>", "<unk>", "</s>"])
def test_a_decoder_tokenizer_that_pads_with_bos_unk_or_eos_pads_with_a_spare(tmp_path, pad):
    tok = _hf_decoder_tokenizer(tmp_path, pad, spare=True)
    assert (tok.cls_id, tok.sep_id, tok.unk_id, tok.pad_id, tok.mask_id) == (0, 1, 2, 23, 23)


@pytest.mark.parametrize("unk", ["<s>", "</s>", None])
def test_a_decoder_unk_that_is_its_bos_or_eos_is_no_text_in_a_shard(tmp_path, unk):
    """GPT-2 and SmolLM2 have one <|endoftext|> for bos, eos and unk; a decoder tokenizer without an unk reads as
    unk = eos. That id inside a shard is a document boundary the reader did not put there, so the scan refuses it,
    naming the shard and document; a separate unk stays text."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from xpt_ds.data.tokenizer import build_hf_tokenizer
    vocab = {"<s>": 0, "</s>": 1, "<pad>": 2, **{f"w{i}": 3 + i for i in range(20)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=unk or "w0"))
    hf = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                 **({"unk_token": unk} if unk else {}))
    hf.save_pretrained(str(tmp_path / "tok"))
    tok = build_hf_tokenizer(str(tmp_path / "tok"), causal=True)
    assert tok.unk_id == {"<s>": 0, "</s>": 1, None: 1}[unk] and tok.not_in_shards == (0, 1, 2)
    bad = write_shard(tmp_path / "bad.tar", [np.array([5, 6]), np.array([7, tok.unk_id, 8])])
    with pytest.raises(DataError) as e:
        build_stream([bad], data_config([bad]), tok)
    assert str(e.value).startswith(f"shard {bad} (document 1) holds special token id {tok.unk_id}: shards hold text")
    assert replace(BIG_VOCAB, unk_id=3).not_in_shards == (0, 1, 2, 4)  # an unk of its own is text


@pytest.mark.parametrize("pad", ["cls_id", "unk_id"])
def test_single_pass_next_token_targets_are_the_stream_when_the_pad_is_cls_or_unk(tmp_path, pad):
    """The packed rows of a validation pass (its last row padded), with a pad id that rows hold elsewhere: the
    targets are the stream's every token, once, in order."""
    from xpt_ds.data.causal import NextTokenTargets
    tok = replace(BIG_VOCAB, pad_id=getattr(BIG_VOCAB, pad))
    docs = [[10, 11, tok.unk_id, 12], [13, tok.unk_id], [14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25]]
    shards = [write_shard(tmp_path / "valid-000000.tar", docs)]
    cfg = data_config(shards, shuffle_docs=1)
    stream = build_stream(shards, cfg, tok)
    batch, = MLMBatchStream(stream, NextTokenTargets(tok), 2, 0, 1, 0, single_pass=True)  # 21 tokens: 2 rows
    assert batch["input_ids"][1, -1] == tok.pad_id  # the last row is short
    assert batch["mlm_targets"].tolist() == stream.tokens(0, stream.epoch_tokens).tolist()

