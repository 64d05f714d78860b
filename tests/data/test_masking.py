"""data.masking: whole words and spans of whole words, on SentencePiece (``▁``) and WordPiece (``##``) vocabularies;
the rate and 80/10/10 per masked piece, specials never masked, masks a function of (seed, sequence index), exact
resume, the config checks, and a short training run."""
import json

import numpy as np
import pytest
import torch

from conftest import base_config, launch, read_metrics, run_main, write_config
from data_builders import BIG_VOCAB, data_config, original_ids
from xpt_ds.config import ConfigError, DataConfig, load_config
from xpt_ds.data.masking import span_length_cdf, span_length_mean, span_lengths
from xpt_ds.data.mlm import MLMBatchStream, MLMMasker, build_stream
from xpt_ds.data.tokenizer import build_hf_tokenizer, build_tokenizer
from xpt_ds.metrics.mlm import starts_word

STRATEGIES = ("whole_word", "span")
WORDPIECE_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "city", "київ", "a", "b", "go", ".", ",",
                   "##s", "##ing", "##ed", "##и", "##ів", "##a", "##b"]


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory):
    from transformers import BertTokenizerFast
    out = tmp_path_factory.mktemp("wordpiece")
    BertTokenizerFast(vocab={p: i for i, p in enumerate(WORDPIECE_VOCAB)}).save_pretrained(out)
    return build_hf_tokenizer(str(out))


@pytest.fixture(params=["sentencepiece", "wordpiece"])
def vocab(request, corpus, wordpiece):
    return build_tokenizer(str(corpus / "spm.model")) if request.param == "sentencepiece" else wordpiece


def _marked(tok, i: int) -> bool:
    """A piece's text marks it as a word's first: ``▁`` (SentencePiece), not ``##`` (WordPiece)."""
    return tok.piece(i).startswith("▁") if tok.kind == "sentencepiece" else not tok.piece(i).startswith("##")


def _rows(tok, B=48, T=256, seed=0):
    """Random words of 2.5 pieces on average between cls and sep, a document separator inside, unk here and there,
    padded tails."""
    g = torch.Generator().manual_seed(seed)
    normal = [i for i in range(tok.vocab_size) if i not in tok.special_ids]
    first = torch.tensor([i for i in normal if _marked(tok, i)])
    rest = torch.tensor([i for i in normal if not _marked(tok, i)])
    ids = torch.where(torch.rand(B, T, generator=g) < 0.4, first[torch.randint(len(first), (B, T), generator=g)],
                      rest[torch.randint(len(rest), (B, T), generator=g)])
    ids[:, 0], ids[:, -1] = tok.cls_id, tok.sep_id
    ids[:, T // 3] = tok.sep_id
    ids[torch.rand(B, T, generator=g) < 0.01] = tok.unk_id
    for b in range(0, B, 4):
        ids[b, T - 20:] = tok.pad_id
        ids[b, T - 21] = tok.sep_id
    return ids


def _words(tok, row: list[int]) -> list[list[int]]:
    """Reference segmentation, written from the rule: a word begins at a piece marked ``▁`` (SentencePiece) or not
    ``##`` (WordPiece), at a special token and after one."""
    special = set(tok.special_ids)
    words = []
    for t, i in enumerate(row):
        if i in special or t == 0 or row[t - 1] in special or _marked(tok, i):
            words.append([])
        words[-1].append(t)
    return words


def _selected(out, shape):
    sel = torch.zeros(shape[0] * shape[1], dtype=torch.bool)
    sel[out["mlm_positions"]] = True
    return sel.view(shape)


@pytest.mark.parametrize("masking", STRATEGIES)
def test_words_are_masked_whole_and_specials_never(vocab, masking):
    ids = _rows(vocab)
    sel = _selected(MLMMasker(DataConfig(masking=masking), vocab)(ids, list(range(len(ids)))), ids.shape)
    special = torch.isin(ids, torch.tensor(vocab.special_ids))
    assert not (sel & special).any()
    runs = []
    for row, s in zip(ids.tolist(), sel.tolist()):
        words = _words(vocab, row)
        assert all(len({s[t] for t in w}) == 1 for w in words)  # no word partly masked
        flags = [s[w[0]] for w in words]
        runs += [len(r) for r in "".join("x" if f else " " for f in flags).split()]  # masked runs, in words
    mean_run = np.mean(runs)
    if masking == "whole_word":
        assert mean_run < 1.6  # single words, now and then two neighbours
    else:
        assert mean_run > 2.5  # spans of several words (mean 3.8, cut at specials, neighbours merge)


def test_span_lengths_follow_spanbert():
    cdf = span_length_cdf(0.2, 10)
    lengths = span_lengths(torch.rand(200_000, generator=torch.Generator().manual_seed(0)), cdf)
    assert lengths.min() == 1 and lengths.max() == 10
    assert abs(span_length_mean(0.2, 10) - 3.8) < 0.01  # SpanBERT's figure
    assert abs(lengths.double().mean().item() - span_length_mean(0.2, 10)) < 0.02
    p1 = (lengths == 1).double().mean().item()
    assert abs(p1 - 0.2 / (1 - 0.8 ** 10)) < 0.005  # geometric, truncated to 1..10 and renormalised
    assert span_lengths(torch.rand(1000), span_length_cdf(0.5, 3)).max() == 3


@pytest.mark.parametrize("masking", ["token", *STRATEGIES])
@pytest.mark.parametrize("rate", [0.15, 0.3])
def test_rate_and_80_10_10_per_piece(vocab, masking, rate):
    ids = _rows(vocab, B=64, T=512, seed=1)
    out = MLMMasker(DataConfig(masking=masking, mask_prob=rate), vocab)(ids, list(range(len(ids))))
    sel = _selected(out, ids.shape)
    maskable = ~torch.isin(ids, torch.tensor(vocab.special_ids))
    assert abs(sel.sum().item() / maskable.sum().item() - rate) < 0.01
    if masking != "token":  # each sequence: the budget, give or take the one word or span that crosses it
        for row, s, m in zip(ids.tolist(), sel, maskable):
            longest = max(len(w) for w in _words(vocab, row)) * (10 if masking == "span" else 1)
            assert abs(s.sum().item() - rate * m.sum().item()) <= longest
    picked = out["input_ids"].flatten()[out["mlm_positions"]]
    assert torch.equal(out["mlm_targets"], ids.flatten()[out["mlm_positions"]])
    assert abs((picked == vocab.mask_id).float().mean().item() - 0.8) < 0.02
    kept = (picked == out["mlm_targets"]).float().mean().item()
    assert abs(kept - 0.1 - 0.1 / (vocab.vocab_size - len(vocab.special_ids))) < 0.02
    assert not torch.isin(picked[picked != vocab.mask_id], torch.tensor(vocab.special_ids)).any()
    assert torch.equal(out["input_ids"][~sel], ids[~sel])


@pytest.mark.parametrize("masking", STRATEGIES)
def test_masks_are_a_function_of_the_sequence_seed(vocab, masking):
    ids = _rows(vocab, B=8)
    masker = MLMMasker(DataConfig(masking=masking), vocab)
    out = masker(ids, list(range(8)))
    again = MLMMasker(DataConfig(masking=masking), vocab)(ids[3:5], [3, 4])  # alone, in another batch
    assert torch.equal(again["input_ids"], out["input_ids"][3:5])
    same_row = ids[:1]  # one sequence under 8 seeds: 8 different masks
    masks = {tuple(_selected(masker(same_row, [s]), (1, ids.shape[1]))[0].nonzero().flatten().tolist())
             for s in range(8)}
    assert len(masks) == 8
    other = MLMMasker(DataConfig(masking="token" if masking == "span" else "span"), vocab)(ids, list(range(8)))
    assert not torch.equal(other["input_ids"], out["input_ids"])


def test_token_masking_is_what_it_was(vocab):
    """The default draws exactly what the masker drew before data.masking existed (three draws per sequence)."""
    ids = _rows(vocab, B=6)
    cfg = DataConfig()
    out = MLMMasker(cfg, vocab)(ids, [11, 12, 13, 14, 15, 16])
    special = torch.tensor(vocab.special_ids)
    normal = torch.tensor([i for i in range(vocab.vocab_size) if i not in vocab.special_ids])
    for j, seed in enumerate(range(11, 17)):
        g = torch.Generator().manual_seed(seed)
        sel_u, act_u = torch.rand(ids.shape[1], generator=g), torch.rand(ids.shape[1], generator=g)
        rnd = torch.randint(len(normal), (ids.shape[1],), generator=g)
        sel = (sel_u < 0.15) & ~torch.isin(ids[j], special)
        to_mask = sel & (act_u < 0.8)
        to_rand = sel & ~to_mask & (act_u < 0.9)
        want = torch.where(to_mask, vocab.mask_id, torch.where(to_rand, normal[rnd], ids[j]))
        assert torch.equal(out["input_ids"][j], want)


def test_wordpiece_punctuation_begins_a_masking_word():
    assert [starts_word(p, "wordpiece", split_punctuation=True) for p in ["city", ".", "##s", "«"]] == [1, 1, 0, 1]
    assert [starts_word(p, "wordpiece") for p in ["city", ".", "##s", "«"]] == [1, 0, 0, 0]  # bits per word: as before
    assert starts_word("▁a", "sentencepiece", split_punctuation=True) and not starts_word(".", "sentencepiece", True)


@pytest.mark.parametrize("masking", ["token", *STRATEGIES])
def test_resume_from_any_position_is_exact(unique_shards, masking):  # noqa: F811
    """A stream read from position k (2 DataLoader workers, rank 1 of 2) is the tail of one read from 0."""
    shards, _ = unique_shards
    cfg = data_config(shards, masking=masking, seq_len=24)
    starts = (torch.arange(BIG_VOCAB.vocab_size) % 3 == 0).double()  # BIG_VOCAB has no piece texts: every third id begins a word

    def make(workers):
        return MLMBatchStream(build_stream(shards, cfg, BIG_VOCAB), MLMMasker(cfg, BIG_VOCAB, starts), 2, 1, 2, workers)

    straight = make(0)
    want = [next(straight) for _ in range(11)]
    assert any(len(w["mlm_positions"]) for w in want)
    resumed = make(2)
    resumed.load_state_dict({"sequences": 5 * 2 * 2})
    for w in want[5:]:
        got = next(resumed)
        assert all(torch.equal(got[k], w[k]) for k in w)
    resumed.close()
    for batch in want:  # whole words on the stream's own text: ids divisible by 3 open a word
        ids = original_ids(batch)
        sel = _selected(batch, ids.shape)
        if masking != "token":
            for row, s in zip(ids.tolist(), sel.tolist()):
                for t in range(1, len(row)):
                    if row[t] % 3 and row[t] not in BIG_VOCAB.special_ids and row[t - 1] not in BIG_VOCAB.special_ids:
                        assert s[t] == s[t - 1]  # a continuation piece shares its word's fate


@pytest.mark.parametrize("overrides,message", [
    (["--data.masking=words"], "config key 'data.masking' is 'words'; valid: token, whole_word, span"),
    (["--data.masking=whole_word", "--data.span_p=0.3"], "'data.span_p' is set but data.masking is 'whole_word'"),
    (["--data.span_max=5"], "'data.span_max' is set but data.masking is 'token' \\(only span reads it\\)"),
    (["--data.masking=span", "--data.span_p=1.5"], "'data.span_p' must be in \\(0, 1\\)"),
    (["--data.masking=span", "--data.span_max=0"], "'data.span_max' must be >= 1"),
])
def test_config_errors_name_the_key(overrides, message):
    base = ["--model.source=src", "--model.tokenizer=spm.model", "--data.train_shards=[a.tar]",
            "--phases=[{name: only, steps: 2, lr: 0.1}]"]
    with pytest.raises(ConfigError, match=message) as info:
        load_config(None, base + overrides)
    assert "\n" not in str(info.value)
    cfg = load_config(None, base + ["--data.masking=span", "--data.span_p=0.3", "--data.span_max=4"])
    assert (cfg.data.masking, cfg.data.span_p, cfg.data.span_max) == ("span", 0.3, 4)


def test_training_with_whole_word_masking_and_another_mask_piece(tmp_path, tiny_roberta, corpus):
    """evaluate --run, the export and evaluate --model mask as the run did: its masking and its model.mask_token
    (until 2026-12-05 they masked with the default <mask>, and scored 5.2015 a run whose own pass said 5.1942)."""
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus)
    cfg["data"]["masking"] = "whole_word"
    cfg["model"]["mask_token"] = "</s>"
    cfg["logging"]["eval_every"] = 4
    cfg["phases"] = [{"name": "phase1", "steps": 2, "lr": 1e-3}, {"name": "phase2", "steps": 2, "lr": 5e-4}]
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(tmp_path / "run")
    assert all(np.isfinite(rows[s]["train/loss"]) for s in (1, 2, 3, 4))
    flags = ["--shards", f"{corpus}/manifest.json:valid", "--max-batches", "2", "--batch-size", "2"]
    proc = run_main("xpt_ds.cli.evaluate", ["--run", str(tmp_path / "run"), *flags])
    assert proc.returncode == 0, proc.stderr[-3000:]
    scored = json.loads(proc.stdout)
    assert scored["masking"] == "whole_word"  # the run's own masking by default
    assert scored["loss"] == pytest.approx(rows[4]["valid/loss"], rel=1e-6)  # the run's own validation pass
    proc = run_main("xpt_ds.cli.export", ["--run", str(tmp_path / "run"), "--out", str(tmp_path / "export")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "export/tokenizer_config.json").read_text())["mask_token"] == "</s>"
    proc = run_main("xpt_ds.cli.evaluate", ["--model", str(tmp_path / "export"), *flags])
    assert proc.returncode == 0 and json.loads(proc.stdout)["loss"] == pytest.approx(scored["loss"], rel=1e-6)
