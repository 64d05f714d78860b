"""Intrinsic metrics: hand-computed ranks, ties and ignored positions; `python -m xpt_ds.cli.evaluate` on a
checkpoint and on its export reproduces the trainer's own periodic validation."""
import json
import math

import pytest
import torch
import yaml

from conftest import base_config, launch, read_metrics, run_main, write_config
from xpt_ds.metrics.mlm import IGNORE, MLMStats, gold_ranks, piece_word_starts, starts_word

LOGITS = torch.tensor([
    [2.0, 1.0, 3.0, 0.0, 1.0],  # gold 0: one score higher -> rank 2
    [1.0, 1.0, 1.0, 0.0, 0.0],  # gold 1: none higher, two others equal -> 1 + 0 + 2/2 = 2
    [9.0, 0.0, 0.0, 0.0, 0.0],  # ignored position
    [0.0, 0.0, 0.0, 0.0, 5.0],  # gold 4: rank 1
    [5.0, 4.0, 3.0, 2.0, 1.0],  # gold 4: rank 5
    [1.0, 1.0, 1.0, 1.0, 1.0],  # gold 0: four others equal -> 1 + 4/2 = 3
])
TARGETS = torch.tensor([0, 1, IGNORE, 4, 4, 0])


def test_ranks_with_ties():
    keep = TARGETS != IGNORE
    assert gold_ranks(LOGITS[keep], TARGETS[keep]).tolist() == [2.0, 2.0, 1.0, 5.0, 3.0]


def test_a_nan_gold_score_ranks_last():
    """NaN compares false with everything: without care a model with NaN logits scored Hits@1 1.0, MRR 2.0."""
    logits = torch.tensor([[0.1, 0.9, 0.3], [float("nan")] * 3, [0.2, float("nan"), 0.1]])
    assert gold_ranks(logits, torch.tensor([1, 0, 1])).tolist() == [1.0, 3.0, 3.0]


def test_metrics_match_hand_computed_values():
    stats = MLMStats()
    stats.update(LOGITS[:3], TARGETS[:3])  # accumulates across batches
    stats.update(LOGITS[3:], TARGETS[3:])
    m = stats.result()
    nll = [math.log(sum(math.exp(x) for x in row)) - row[t]
           for row, t in zip(LOGITS.tolist(), TARGETS.tolist()) if t != IGNORE]
    assert m["tokens"] == 5
    assert m["loss"] == pytest.approx(sum(nll) / 5) and m["ppl"] == pytest.approx(math.exp(sum(nll) / 5))
    assert (m["hits@1"], m["hits@3"], m["hits@5"], m["hits@10"]) == (1 / 5, 4 / 5, 1.0, 1.0)
    assert m["mrr"] == pytest.approx((1 / 2 + 1 / 2 + 1 + 1 / 5 + 1 / 3) / 5)
    assert m["mr"] == pytest.approx(13 / 5)


def test_batched_shapes_and_nothing_to_score():
    stats = MLMStats()
    stats.update(LOGITS.reshape(2, 3, 5), TARGETS.reshape(2, 3))
    assert stats.result()["mr"] == pytest.approx(13 / 5)
    empty = MLMStats()
    empty.update(LOGITS[2:3], TARGETS[2:3])
    assert empty.result() == {"tokens": 0}


def test_unigram_predictor_scores_smoothed_training_frequencies():
    from xpt_ds.evaluation.intrinsic import UnigramPredictor
    from xpt_ds.data.tokenizer import TargetTokenizer
    tok = TargetTokenizer("spm.model", vocab_size=7, pad_id=0, cls_id=1, sep_id=2, unk_id=3, mask_id=4)
    counts = torch.tensor([50, 9, 9, 1, 9, 5, 2])  # specials' counts other than unk's are ignored
    log_p = UnigramPredictor(counts, tok)(torch.zeros(1, 4, dtype=torch.long), torch.arange(3), torch.zeros(3))
    assert log_p.shape == (3, 7)
    # add-one over unk and the two ordinary pieces: (1+1, 5+1, 2+1) / 11
    expected = torch.tensor([-math.inf] * 3 + [math.log(2 / 11), -math.inf, math.log(6 / 11), math.log(3 / 11)])
    assert torch.equal(torch.isinf(log_p[0]), torch.isinf(expected))
    assert torch.allclose(log_p[1][~torch.isinf(expected)], expected[~torch.isinf(expected)].float())
    stats = MLMStats()
    stats.update(log_p, torch.tensor([5, 6, 3]))
    m = stats.result()
    assert m["hits@1"] == pytest.approx(1 / 3) and m["mr"] == pytest.approx((1 + 2 + 3) / 3)
    assert m["loss"] == pytest.approx(-(math.log(6 / 11) + math.log(3 / 11) + math.log(2 / 11)) / 3)


def test_uniform_guess_spreads_over_every_possible_target():
    from xpt_ds.evaluation.intrinsic import UnigramPredictor
    from xpt_ds.data.tokenizer import TargetTokenizer
    tok = TargetTokenizer("spm.model", vocab_size=7, pad_id=0, cls_id=1, sep_id=2, unk_id=3, mask_id=4)
    log_p = UnigramPredictor.uniform(tok)(torch.zeros(1, 4, dtype=torch.long), torch.arange(2), torch.zeros(2))
    possible = torch.tensor([False, False, False, True, False, True, True])  # unk and the two ordinary pieces
    assert torch.isinf(log_p[:, ~possible]).all() and torch.allclose(log_p[:, possible], torch.tensor(-math.log(3)))
    stats = MLMStats()
    stats.update(log_p, torch.tensor([5, 6]))
    assert stats.result()["ppl"] == pytest.approx(3)


def test_starts_word_three_marker_styles():
    # " the city's." in each style: two words, each counted once, on its first piece
    assert [starts_word(p, "sentencepiece") for p in ["▁the", "▁city", "'", "s", "."]] == [1, 1, 0, 0, 0]
    assert [starts_word(p, "byte_level") for p in ["Ġthe", "Ġcity", "'s", "."]] == [1, 1, 0, 0]
    assert [starts_word(p, "wordpiece") for p in ["the", "city", "'", "s", "."]] == [1, 1, 0, 1, 0]  # BERT: 's' a word
    assert [starts_word(p, "wordpiece") for p in ["##ing", "...", "«", "a1", "київ"]] == [0, 0, 0, 1, 1]
    with pytest.raises(ValueError, match="unknown marker style"):
        starts_word("x", "bpe")


def test_bits_per_word_hand_computed():
    """Vocabulary [<pad>, <unk>, ▁the, ▁ci, ty, ▁a]: masked pieces '▁the', 'ty', '▁a', 'ty' (one ignored).
    Uniform logits: each NLL is ln 6 nats = log2 6 bits; 4 pieces, 2 of them word-initial -> 2 log2 6 bits/word."""
    from xpt_ds.data.tokenizer import TargetTokenizer

    class Tok(TargetTokenizer):
        def piece(self, i):
            return ["<pad>", "<unk>", "▁the", "▁ci", "ty", "▁a"][i]

    tok = Tok("spm.model", vocab_size=6, pad_id=0, cls_id=0, sep_id=0, unk_id=1, mask_id=0)
    starts = piece_word_starts(tok)
    assert starts.tolist() == [0, 0, 1, 1, 0, 1]  # specials (unk too, outside WordPiece) begin no word
    stats = MLMStats(word_starts=starts)
    stats.update(torch.zeros(5, 6), torch.tensor([2, 4, IGNORE, 5, 4]))
    r = stats.result()
    assert r["tokens"] == 4 and r["words"] == 2 and "bits_per_char" not in r
    assert r["bits_per_word"] == pytest.approx(4 * math.log2(6) / 2, rel=1e-6)  # fp32 cross-entropy
    assert r["bits_per_word"] == pytest.approx(r["loss"] * r["tokens"] / math.log(2) / r["words"], rel=1e-12)
    none = MLMStats(word_starts=starts)  # no masked word-initial piece: undefined, not a division by zero
    none.update(torch.zeros(1, 6), torch.tensor([4]))
    assert math.isnan(none.result()["bits_per_word"])


def _evaluate(*args):
    return run_main("xpt_ds.cli.evaluate", list(args))


def test_evaluate_reproduces_the_trainers_validation(tmp_path, tiny_roberta, corpus):
    run = tmp_path / "run"
    cfg = base_config(run, tiny_roberta, corpus)
    cfg["logging"]["eval_batches"] = 0  # the whole validation set, as evaluate does
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = read_metrics(run)[8]
    valid = f"{corpus}/manifest.json:valid"

    out = _evaluate("--run", str(run), "--shards", valid, "--out", str(tmp_path / "ckpt.json"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "warning" not in out.stderr
    from_ckpt = json.loads((tmp_path / "ckpt.json").read_text())
    # the run's own training shards: scored, and said not to be held out (until 2026-12-04 without a word)
    trained = _evaluate("--run", str(run), "--shards", f"{corpus}/manifest.json:train", "--max-batches", "1")
    assert trained.returncode == 0 and "are in the run's data.train_shards: these figures are on training data, " \
        "not held out" in trained.stderr, trained.stderr[-2000:]
    assert from_ckpt["tag"] == "global_step000000008" and from_ckpt["tokens"] > 0
    for k in ("loss", "ppl", "hits@1", "hits@3", "hits@5", "hits@10", "mrr", "mr", "bits_per_char",
              "bits_per_word"):
        assert from_ckpt[k] == pytest.approx(final[f"valid/{k}"], rel=1e-6), k
    assert 0 < from_ckpt["words"] < from_ckpt["tokens"]

    out = _evaluate("--run", str(run), "--shards", valid, "--unigram", f"{corpus}/manifest.json:train")
    assert out.returncode == 0, out.stderr[-2000:]
    unigram = json.loads(out.stdout)
    assert unigram["unigram"] == [f"{corpus}/manifest.json:train"] and unigram["tokens"] == from_ckpt["tokens"]
    assert unigram["loss"] != pytest.approx(from_ckpt["loss"], rel=1e-3)
    assert unigram["chars"] == from_ckpt["chars"]  # the same masked tokens

    # a corrupt shard: the run's data.on_corrupt_shard (fail) stops; --on-corrupt-shard skip scores the rest and
    # says which it left out, in the JSON too
    broken = tmp_path / "broken-000000.tar"
    broken.write_bytes(b"not a tar" * 100)
    out = _evaluate("--run", str(run), "--shards", valid, str(broken))
    assert out.returncode == 2 and f"corrupt shard {broken}" in out.stderr.strip().splitlines()[-1], out.stderr[-2000:]
    out = _evaluate("--run", str(run), "--shards", valid, str(broken), "--on-corrupt-shard", "skip")
    assert out.returncode == 0, out.stderr[-2000:]
    skipped = json.loads(out.stdout)
    assert skipped["skipped_shards"] == [str(broken)] and skipped["tokens"] == from_ckpt["tokens"]
    assert "skipped_shards" not in from_ckpt
    out = _evaluate("--run", str(run), "--shards", valid, "--unigram", f"{corpus}/manifest.json:train", str(broken),
                    "--on-corrupt-shard", "skip")  # the unigram's counts leave the broken training shard out
    assert out.returncode == 0, out.stderr[-2000:]
    left_out = json.loads(out.stdout)
    assert left_out["unigram_skipped_shards"] == [str(broken)] and "skipped_shards" not in left_out
    assert left_out["loss"] == pytest.approx(unigram["loss"], rel=1e-9)  # the same counts as without the shard
    assert "unigram_skipped_shards" not in unigram

    export = tmp_path / "export"
    proc = run_main("xpt_ds.cli.export", ["--run", str(run), "--out", str(export)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = _evaluate("--model", str(export), "--shards", valid)  # the run's seq_len and mask seed: config.json
    assert out.returncode == 0, out.stderr[-2000:]
    from_export = json.loads(out.stdout)
    assert from_export["seq_len"] == cfg["data"]["seq_len"] == 32
    for k in ("tokens", "loss", "hits@1", "mrr", "mr"):
        assert from_export[k] == pytest.approx(from_ckpt[k], rel=1e-6), k

    (export / "spm.model").unlink()
    out = _evaluate("--model", str(export), "--shards", valid)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(f"error: --model {export} has no spm.model")
    out = _evaluate("--model", str(tmp_path / "no_such_export"), "--shards", valid)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == (
        f"error: --model {tmp_path / 'no_such_export'}: no such directory (an xpt_ds.cli.export output)")


def test_a_multi_rank_validation_scores_the_first_eval_batches_global_micro_batches(straight_runs):
    """2 ranks, logging.eval_batches 2, micro-batch 2: the trainer scores the first 2 global micro-batches (4
    sequences: rank 0 scores one, rank 1 one, then neither scores its second, which both run), the sequences
    ``evaluate --run --max-batches 2 --batch-size 2`` scores in one process. Each rank scored 2 of its own before,
    8 sequences in all, so valid/* changed with the number of ranks."""
    from xpt_ds.metrics.mlm import scored_batch
    assert [scored_batch(b, 3, r, 2) for b in range(3) for r in range(2)] == [True, True, True, False, None, None]
    assert [scored_batch(b, 0, 1, 4) for b in range(3)] == [True] * 3
    run = straight_runs(2) / "run"
    cfg = yaml.safe_load((run.parent / "cfg.yaml").read_text())
    assert (cfg["logging"]["eval_batches"], cfg["optim"]["micro_batch_size"]) == (2, 2)
    shards = cfg["data"]["valid_shards"]
    out = _evaluate("--run", str(run), "--tag", "global_step000000008", "--shards", *shards, "--max-batches", "2",
                    "--batch-size", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    single = json.loads(out.stdout)
    trained = read_metrics(run)[8]
    for k in ("loss", "hits@1", "mrr", "mr", "bits_per_char"):
        assert single[k] == pytest.approx(trained[f"valid/{k}"], rel=1e-6), k


def test_a_resume_from_a_checkpoint_validated_per_rank_says_the_set_changed(tmp_path):
    """A checkpoint from before eval_batches counted global micro-batches (no log_window in its client state),
    written by 2 ranks, validated 2 x eval_batches micro-batches: the resume says so, and how to score that set."""
    from xpt_ds.config import LoggingConfig
    from xpt_ds.checkpoint.tag_checks import validation_change
    tag = tmp_path / "global_step000000006"
    tag.mkdir()
    (tag / "COMPLETE").write_text(json.dumps({"global_step": 6, "world_size": 2, "zero_stage": 2}))
    line = validation_change(tag, {}, LoggingConfig(eval_batches=3), True)
    assert "on each of its 2 ranks (6 in all)" in line and "logging.eval_batches=6 scores the set it did" in line
    assert validation_change(tag, {"log_window": {}}, LoggingConfig(eval_batches=3), True) is None  # written since
    assert validation_change(tag, {}, LoggingConfig(eval_batches=0), True) is None  # the whole split: the same
    (tag / "COMPLETE").write_text(json.dumps({"global_step": 6, "world_size": 1}))
    assert validation_change(tag, {}, LoggingConfig(eval_batches=3), True) is None


def test_the_json_shows_the_samples_text_as_itself(tmp_path, capsys):
    """A decoder's samples are target-language text: printed and written as that text, not as JSON's ASCII escapes."""
    from xpt_ds.evaluation.intrinsic import emit_json
    emit_json({"samples": [{"prompt": "의 안 번 호"}]}, tmp_path / "out.json")
    printed = capsys.readouterr().out
    assert '"prompt": "의 안 번 호"' in printed and "\\u" not in printed
    assert (tmp_path / "out.json").read_text(encoding="utf-8") == printed


def test_out_is_written_whole_or_not_at_all(tmp_path, monkeypatch, capsys):
    """--out is written beside and renamed over (``write_text_atomic``): a write that stops partway (a full disk)
    leaves the file an earlier evaluation wrote as it was, not cut off."""
    import builtins
    import errno
    import io

    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from xpt_ds.cli.evaluate import main
    lines = ["the cat sat on the mat", "a dog ran to the park"]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines * 10, vocab_size=280, min_frequency=2, show_progress=False,
                            special_tokens=["<|endoftext|>"])
    model = tmp_path / "gpt2"
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                  eos_token="<|endoftext|>")
    tok.save_pretrained(str(model))
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=16, bos_token_id=0,
                               eos_token_id=0)).save_pretrained(model)
    (tmp_path / "text.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "scores.json"
    out.write_text("an earlier evaluation\n")
    real_open = io.open

    def full_disk(file, mode="r", *args, **kw):  # a write to --out (or beside it) stops halfway
        f = real_open(file, mode, *args, **kw)
        if "w" in mode and str(file).startswith(str(out)):
            write = f.write

            def half(text):
                write(text[:len(text) // 2])
                raise OSError(errno.ENOSPC, "No space left on device")
            f.write = half
        return f
    with monkeypatch.context() as m:
        m.setattr(builtins, "open", full_disk)
        m.setattr(io, "open", full_disk)  # pathlib's
        assert main(["--model", str(model), "--text", str(tmp_path / "text.txt"), "--out", str(out)]) != 0
    assert "No space left on device" in capsys.readouterr().err  # it stopped at the write, not before
    assert out.read_text() == "an earlier evaluation\n"
    assert main(["--model", str(model), "--text", str(tmp_path / "text.txt"), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["text"][str(tmp_path / "text.txt")]["tokens"] > 0
