"""data.mix: the schedule's counts and spread, and a blended stream whose rows are each corpus's own rows, in order,
on any number of ranks and workers, exact across a resume, and continuing every corpus where it stopped when the
weights change."""
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from data_builders import BIG_VOCAB, data_config, original_ids
from xpt_ds.config import ConfigError, MixConfig, PhaseConfig, TrainConfig, validate
from xpt_ds.data.mixture import PERIOD, Mixture, Schedule, quotas
from xpt_ds.data.mlm import MLMBatchStream, MLMMasker, build_stream, build_streams, shuffle_buffer
from xpt_ds.data.shards import DataError
from xpt_ds.training.guards import skipped_shards

WEIGHTS = [[0.7, 0.2, 0.1], [0.9, 0.1], [0.5, 0.25, 0.125, 0.125], [1 / 3] * 3, [0.9998, 0.0001, 0.0001]]


@pytest.mark.parametrize("weights", WEIGHTS, ids=[str(len(w)) + "-" + str(w[1]) for w in WEIGHTS])
def test_schedule_counts_and_spreads_every_corpus_by_its_weight(weights):
    s = Schedule(quotas(weights))
    assert s.quota.sum() == PERIOD and all(abs(q - w * PERIOD) <= 1 for q, w in zip(s.quota, weights))
    rows = np.array([s.corpus(i) for i in range(3 * PERIOD + 17)])
    counts = np.zeros((len(weights), len(rows) + 1), np.int64)
    counts[:, 1:] = np.cumsum(rows[None, :] == np.arange(len(weights))[:, None], axis=1)
    for i in [0, 1, 2, 99, PERIOD - 1, PERIOD, PERIOD + 1, 2 * PERIOD + 5, len(rows)]:
        assert np.array_equal(s.before(i), counts[:, i]), i
    for n in (16, 100, 1000):  # any window of n rows holds each corpus's share to within a row or two
        window = counts[:, n:] - counts[:, :-n]
        assert np.abs(window - np.array(s.quota)[:, None] * n / PERIOD).max() < 2, n


def test_quotas_give_every_weight_a_row_and_sum_to_the_period():
    assert quotas([0.9, 0.1]) == (9000, 1000) and quotas([0.9, 0, 0.1]) == (9000, 0, 1000)
    assert quotas([1 / 3] * 3) == (3334, 3333, 3333)
    assert quotas([0.99975, 0.00006, 0.00006, 0.00006, 0.00007]) == (9996, 1, 1, 1, 1)  # rounding gave three none


def _corpora(unique_shards):
    """data.train_shards: 3 of the 5 shards; a mixed-in corpus: the other 2 (their ids unique to each document)."""
    shards, _ = unique_shards
    return shards[:3], shards[3:]


def _mixed(main, other, weights, B=2, rank=0, world=1, workers=0, cfg=None):
    cfg = cfg or data_config(main)
    streams = [build_stream(main, cfg, BIG_VOCAB), build_stream(other, cfg, BIG_VOCAB)]
    mixture = Mixture(["train", "en"], streams, weights)
    return MLMBatchStream(streams[0], MLMMasker(cfg, BIG_VOCAB), B, rank, world, workers, mixture=mixture)


def _rows(batch) -> dict[int, np.ndarray]:
    return dict(zip(batch["seq_ids"].tolist(), original_ids(batch)[:, 1:-1].numpy()))


@pytest.mark.parametrize("workers", [0, 2])
def test_each_row_is_its_corpus_own_next_row_on_any_ranks_and_workers(unique_shards, workers):
    main, other = _corpora(unique_shards)
    world, B, weights = 2, 3, [0.7, 0.3]
    ranks = [_mixed(main, other, weights, B, r, world, workers) for r in range(world)]
    got = {}
    for _ in range(6):
        for s in ranks:
            got.update(_rows(next(s)))
    assert sorted(got) == list(range(6 * world * B))
    body, schedule, streams = 14, ranks[0].mixture.schedule, ranks[0].mixture.streams
    taken = [0, 0]
    for i in sorted(got):
        c = schedule.corpus(i)
        want = streams[c].tokens(taken[c] * body, (taken[c] + 1) * body)
        assert np.array_equal(got[i], want), (i, c)
        taken[c] += 1
    assert taken == [int(x) for x in schedule.before(len(got))] and taken[1] > 0
    assert ranks[0].positions() == {"train": taken[0], "en": taken[1]}
    mixed_ids = set(np.concatenate([v for v in got.values()]).tolist())
    only_main = set(streams[0].tokens(0, streams[0].epoch_tokens).tolist())
    assert mixed_ids - only_main  # the other corpus's ids are in the blend


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_and_another_world_size_give_the_uninterrupted_rows(unique_shards, workers):
    main, other = _corpora(unique_shards)
    straight = _mixed(main, other, [0.6, 0.4], B=2)
    want = {}
    for _ in range(20):
        want.update(_rows(next(straight)))
    two = [_mixed(main, other, [0.6, 0.4], 2, r, 2, workers) for r in range(2)]
    got = {}
    for _ in range(3):
        for s in two:
            got.update(_rows(next(s)))
    one = _mixed(main, other, [0.6, 0.4], 2, 0, 1, workers)
    one.load_state_dict(two[0].state_dict())
    assert one.state_dict() == two[1].state_dict()
    for _ in range(8):
        got.update(_rows(next(one)))
    assert sorted(got) == list(range(28))
    assert all(np.array_equal(got[i], want[i]) for i in got)


def _continues(stream, batches: int, positions: dict[str, int]) -> list[int]:
    """Reads ``batches`` batches: each corpus's rows, in sequence order, are its own stream's rows from its position in
    ``positions`` on, consecutively; returns how many rows each corpus gave."""
    rows, body, mixture = {}, stream.stream.cfg.seq_len - 2, stream.mixture
    for _ in range(batches):
        rows.update(_rows(next(stream)))
    taken = [positions[name] for name in mixture.names]
    for i in sorted(rows):
        c = mixture.schedule.corpus(i)
        assert np.array_equal(rows[i], mixture.streams[c].tokens(taken[c] * body, (taken[c] + 1) * body)), (i, c)
        taken[c] += 1
    return [t - positions[name] for t, name in zip(taken, mixture.names)]


@pytest.mark.parametrize("workers", [0, 2])
def test_other_weights_on_resume_continue_each_corpus_where_it_stopped(unique_shards, workers):
    main, other = _corpora(unique_shards)
    before = _mixed(main, other, [0.9, 0.1])
    for _ in range(7):
        next(before)
    saved = before.state_dict()
    assert saved["positions"]["train"] + saved["positions"]["en"] == saved["sequences"] == 14
    assert saved["positions"]["en"] > 0
    after = _mixed(main, other, [0.5, 0.5], workers=workers)
    after.load_state_dict(saved)
    assert after.positions() == saved["positions"]
    assert min(_continues(after, 10, saved["positions"])) > 5
    plain = MLMBatchStream(before.stream, before.masker, 2, 0, 1, workers)  # data.mix removed: train goes on alone
    plain.load_state_dict(saved)
    want = before.stream.tokens(saved["positions"]["train"] * 14, (saved["positions"]["train"] + 1) * 14)
    assert np.array_equal(original_ids(next(plain))[0, 1:-1].numpy(), want)
    blended = _mixed(main, other, [0.5, 0.5], workers=workers)  # data.mix added to an unmixed run: en from its start
    blended.load_state_dict({"sequences": 8, "seq_len": 16})
    assert blended.positions() == {"train": 8, "en": 0}
    assert min(_continues(blended, 6, {"train": 8, "en": 0})) > 3


def test_resume_at_another_seq_len_converts_each_corpus_position(unique_shards):
    main, other = _corpora(unique_shards)
    short = _mixed(main, other, [0.5, 0.5])
    for _ in range(5):
        next(short)
    saved = short.state_dict()
    long = _mixed(main, other, [0.5, 0.5], cfg=data_config(main, seq_len=24))
    long.load_state_dict(saved)
    for name, rows in long.positions().items():  # the first 22-token row at or after the token each stopped at
        stopped = saved["positions"][name] * 14
        assert rows * 22 >= stopped > (rows - 1) * 22, name


@pytest.mark.parametrize("workers", [0, 2])
def test_a_phase_reweighting_keeps_positions_and_a_resume_in_it_gives_the_same_rows(unique_shards, workers):
    """Phase 1 without the other corpus (weight 0), phase 2 with it from sequence 8: the switch keeps each corpus's
    position, a corpus at weight 0 gets no row, and a resume inside phase 2 (the stream built at data.mix's
    weights, the state loaded, then the phase's weights set) reads the uninterrupted rows."""
    main, other = _corpora(unique_shards)
    straight = _mixed(main, other, [0.5, 0.5], workers=workers)
    straight.reweight([1.0, 0.0])
    rows = {}
    for _ in range(4):
        rows.update(_rows(next(straight)))
    assert straight.positions() == {"train": 8, "en": 0}
    straight.reweight([0.7, 0.3])
    assert straight.positions() == {"train": 8, "en": 0}
    saved = None
    for b in range(12):
        rows.update(_rows(next(straight)))
        saved = straight.state_dict() if b == 4 else saved
    body, streams = 14, straight.mixture.streams
    assert all(np.array_equal(rows[i], streams[0].tokens(i * body, (i + 1) * body)) for i in range(8))
    resumed = _mixed(main, other, [0.5, 0.5], workers=workers)
    resumed.load_state_dict(saved)
    resumed.reweight([0.7, 0.3])
    assert resumed.positions() == saved["positions"]
    got = {}
    for _ in range(7):
        got.update(_rows(next(resumed)))
    assert sorted(got) == list(range(saved["sequences"], 32))
    assert all(np.array_equal(got[i], rows[i]) for i in got)


def test_mix_weights_of_a_phase():
    from xpt_ds.config.phase_checks import mix_weights
    cfg = TrainConfig()
    cfg.data.mix = [MixConfig(name="en", shards=["a"], weight=0.1), MixConfig(name="de", shards=["b"], weight=0.2)]
    cfg.phases = [PhaseConfig(name="p1", steps=1, mix={"en": 0, "de": 0}), PhaseConfig(name="p2", steps=1),
                  PhaseConfig(name="p3", steps=1, mix={"de": 0.5})]
    assert [mix_weights(cfg, i) for i in range(3)] == [[1.0, 0.0, 0.0], pytest.approx([0.7, 0.1, 0.2]),
                                                       pytest.approx([0.4, 0.1, 0.5])]


@pytest.mark.parametrize("mix,needle", [
    ([{"name": "train", "shards": ["a.tar"], "weight": 0.1}], "data.mix[0].name' is 'train'"),
    ([{"name": "en wiki", "shards": ["a.tar"], "weight": 0.1}], "data.mix[0].name' is 'en wiki'"),
    ([{"name": "en", "shards": [], "weight": 0.1}], "data.mix[0].shards' is empty"),
    ([{"name": "en", "shards": ["a.tar"], "weight": 0}], "data.mix[0].weight' must be between 0 and 1"),
    ([{"name": "en", "shards": ["a.tar"], "weight": 0.00001}], "below the mixture's resolution, 1/10000"),
    ([{"name": "en", "shards": ["a"], "weight": 0.5}, {"name": "en", "shards": ["b"], "weight": 0.2}],
     "data.mix[1].name' 'en' names two data.mix entries"),
    ([{"name": "en", "shards": ["a"], "weight": 0.6}, {"name": "de", "shards": ["b"], "weight": 0.4}],
     "weights sum to 1, leaving data.train_shards no share"),
])
def test_bad_mix_entries_are_named(mix, needle):
    cfg = TrainConfig()
    cfg.data.train_shards, cfg.data.mix = ["t.tar"], [MixConfig(**m) for m in mix]
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    assert needle in str(e.value), str(e.value)


@pytest.mark.parametrize("mix,needle", [
    ({"fr": 0.1}, "'phases[1].mix' names 'fr', which is no data.mix corpus (en)"),
    ({"en": 1.0}, "'phases[1].mix.en' must be 0 or a weight from 1/10000 to below 1, got 1.0"),
    ({"en": "some"}, "'phases[1].mix.en' must be 0 or a weight from 1/10000 to below 1, got 'some'"),
    ({"en": 0.99995}, "'phases[1].mix' leaves data.train_shards no share in that phase"),
])
def test_bad_phase_weights_are_named(mix, needle):
    cfg = TrainConfig()
    cfg.data.train_shards, cfg.data.mix = ["t.tar"], [MixConfig(name="en", shards=["e.tar"], weight=0.1)]
    cfg.phases = [PhaseConfig(name="p1", steps=1), PhaseConfig(name="p2", steps=1, mix=mix)]
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    assert needle in str(e.value), str(e.value)


def test_a_mix_corpus_of_missing_or_corrupt_shards_is_named_or_skipped(unique_shards, tmp_path):
    main, other = _corpora(unique_shards)
    cfg = data_config(main, mix=[MixConfig(name="en", shards=[str(tmp_path / "en-000000.tar")], weight=0.1)])
    with pytest.raises(ConfigError, match=f"shard not found: {tmp_path / 'en-000000.tar'}"):
        build_streams(cfg, BIG_VOCAB, 2, 0, 1)
    bad = Path(other[0])
    bad.write_bytes(bad.read_bytes()[:700])  # truncated inside its first document
    cfg = data_config(main, mix=[MixConfig(name="en", shards=other, weight=0.1)])
    with pytest.raises(DataError, match=f"corrupt shard {bad}: "):
        build_streams(cfg, BIG_VOCAB, 2, 0, 1)
    train, _ = build_streams(replace(cfg, on_corrupt_shard="skip"), BIG_VOCAB, 2, 0, 1)
    assert skipped_shards(train) == [str(bad)] and [s.indexes[0].path for s in train.mixture.streams] == [
        main[0], other[1]]


def test_a_resume_with_other_mix_settings_says_so():
    from xpt_ds.checkpoint.tag_checks import data_changes
    from xpt_ds.config.manager import to_dict
    cfg = TrainConfig()
    cfg.data.mix = [MixConfig(name="en", shards=["en.tar"], weight=0.1)]
    saved = to_dict(cfg)["data"]
    assert data_changes(saved, cfg.data) == []
    cfg.data.mix[0].weight = 0.2
    assert data_changes(saved, cfg.data) == [f"data.mix {saved['mix']!r} -> {to_dict(cfg)['data']['mix']!r}"]
    del saved["mix"]  # a checkpoint from before data.mix: it blended nothing
    assert data_changes(saved, cfg.data)[0].startswith("data.mix [] -> [{'name': 'en'")
    cfg.data.mix = []
    assert data_changes(saved, cfg.data) == []


@pytest.mark.parametrize("n_mix", [1, 2])
def test_each_corpus_shuffles_an_epoch_once(tmp_path, n_mix, monkeypatch):
    """Every corpus keeps its own epoch layouts: rows alternating between three corpora, and rows crossing an epoch's
    end, shuffle each corpus's epoch once (a cache of two layouts shared by all streams rebuilt one at almost every
    row)."""
    from conftest import write_shard
    from xpt_ds.data import mlm
    rng = np.random.default_rng(0)
    shards = [[write_shard(tmp_path / f"c{c}.tar", [rng.integers(10, 60000, int(rng.integers(1, 12)))
                                                     for _ in range(6)])] for c in range(1 + n_mix)]
    cfg = data_config(shards[0])
    streams = [build_stream(s, cfg, BIG_VOCAB) for s in shards]
    weights = [0.2] * n_mix
    mixture = Mixture(["train", *(f"mix{c}" for c in range(n_mix))], streams, [1 - sum(weights), *weights])
    shuffles = []
    monkeypatch.setattr(mlm, "shuffle_buffer", lambda *a: shuffles.append(1) or shuffle_buffer(*a))
    s = MLMBatchStream(streams[0], MLMMasker(cfg, BIG_VOCAB), 2, 0, 1, 0, mixture=mixture)
    for _ in range(40):
        next(s)
    body = cfg.seq_len - 2
    epochs = [(rows * body - 1) // t.epoch_tokens + 1 for rows, t in zip(s.positions().values(), streams)]
    assert min(epochs) >= 3 and len(shuffles) == sum(epochs), (len(shuffles), epochs)
