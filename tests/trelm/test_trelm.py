"""TreLM (004, method trelm): the TRILayer's reordering and masks, the language embeddings, the identity order
against the stock path, the CdLM + MLM objective, the parallel batch stream's exact resume, and a short run
through the real entry point."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from transformers import BertForMaskedLM

from conftest import SOURCE_VOCAB, base_config, launch, read_metrics, write_config
from trelm_builders import build_trelm, trelm_skeleton, trelm_stream, trelm_train_config, write_parallel
from xpt_ds.checkpoint import store as checkpoint
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.config import ConfigError, DataConfig, load_config
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.trelm.model import ENGLISH, TARGET, encode, halves, lm_logits
from xpt_ds.trelm.objective import TreLMObjective


def test_reorder_takes_aligned_states_and_the_placeholder():
    parts = trelm_skeleton().trelm
    hidden = torch.arange(4 * 64, dtype=torch.float32).reshape(1, 4, 64)
    out = parts.reorder(hidden, torch.tensor([[2, 0, -1, 1, 3]]))  # 5 target positions from 4 source positions
    assert out.shape == (1, 5, 64)
    for i, j in enumerate([2, 0, None, 1, 3]):
        assert torch.equal(out[0, i], parts.placeholder.detach() if j is None else hidden[0, j])


def test_upper_half_attends_with_the_target_mask():
    """Source: 3 real positions of 6; target: 5 real of 6. Target position 3 reads the placeholder; with the
    target mask every real output depends on it (with the source mask it would be padding), and nothing real
    depends on the target's padding position 5."""
    model = trelm_skeleton()
    ids = torch.tensor([[2, 10, 11, 0, 0, 0]])
    src_mask, tgt_mask = torch.tensor([[1, 1, 1, 0, 0, 0]]), torch.tensor([[1, 1, 1, 1, 1, 0]])
    order = torch.tensor([[0, 2, 1, -1, 1, -1]])
    lang = torch.tensor([ENGLISH])

    def run(order=order):
        with torch.no_grad():
            return encode(model, ids, src_mask, lang, order, tgt_mask)[0]

    before = run()
    with torch.no_grad():
        model.trelm.placeholder.add_(1.0)
    moved = run()
    assert not torch.allclose(before[:3], moved[:3], atol=1e-4)  # fails if the upper half kept the source mask
    assert torch.allclose(moved[:5], run(torch.tensor([[0, 2, 1, -1, 1, 0]]))[:5], atol=1e-6)


class _Undo(nn.Module):
    """A TRILayer that gives back the lower half's output: subtracts the position rows encode added."""

    def __init__(self, model: nn.Module, length: int):
        super().__init__()
        self.rows = model.bert.embeddings.position_embeddings if hasattr(model, "bert") \
            else model.roberta.embeddings.position_embeddings
        self.positions = model.config.xpt_position_offset + torch.arange(length)

    def forward(self, x, mask=None):
        return x - self.rows(self.positions)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_identity_order_is_the_stock_path(family):
    """With zero language rows and a pass-through TRILayer, encode with the identity order is the stock encoder
    (same embeddings, positions, masks and layers); with the real TRILayer, order=None is the explicit identity."""
    model = trelm_skeleton(family, layers=4)
    pad = model.config.pad_token_id
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, pad, pad, pad]])
    mask = (ids != pad).long()
    with torch.no_grad():
        identity = torch.arange(6).expand(2, 6)
        # bit for bit: batches without CdLM rows leave the order out (trelm_data.join)
        assert torch.equal(encode(model, ids, mask), encode(model, ids, mask, order=identity, output_mask=mask))
        model.trelm.language_embeddings.weight.zero_()
        model.trelm.trilayer = _Undo(model, 6)
        stock = getattr(model, model.base_model_prefix)(input_ids=ids, attention_mask=mask).last_hidden_state
        mine = encode(model, ids, mask)
    real = mask.bool()
    assert torch.allclose(mine[real], stock[real], atol=1e-5)


def test_build_initialises_and_tags(source_dir, corpus_bert):
    built = build_trelm(source_dir, corpus_bert)
    model, tags = built.model, built.tags
    src = BertForMaskedLM.from_pretrained(source_dir)
    assert halves(model) == 2
    lang = model.trelm.language_embeddings.weight.detach()
    assert torch.allclose(lang @ lang.T, torch.eye(2), atol=1e-5)  # both rows set, orthonormal
    assert torch.equal(lang, build_trelm(source_dir, corpus_bert).model.trelm.language_embeddings.weight.detach())
    other_seed = build_trelm(source_dir, corpus_bert, init_seed=99).model.trelm.language_embeddings.weight
    assert not torch.allclose(lang, other_seed)
    for k, v in model.trelm.trilayer.state_dict().items():
        assert torch.equal(v, src.bert.encoder.layer[1].state_dict()[k]), k
    assert torch.equal(model.trelm.source_word_embeddings.weight, src.bert.embeddings.word_embeddings.weight)
    assert torch.equal(model.trelm.source_lm_bias, src.cls.predictions.bias)

    def named(tag):
        return {n for n, t in tags.items() if tag in t}

    assert named("@trilayer") == {n for n in tags if n.startswith(("trelm.trilayer.", "trelm.placeholder"))}
    assert named("@lang") == {"trelm.language_embeddings.weight"}
    assert {n.split(".")[3] for n in named("@lower")} == {"0", "1"}
    assert {n.split(".")[3] for n in named("@upper")} == {"2", "3"}
    assert {"trelm.source_word_embeddings.weight", "trelm.source_lm_bias"} <= named("@source")
    assert named("@trilayer") | named("@lang") <= named("@new")
    assert "trelm.source_word_embeddings.weight" in named("@embeddings")


def test_english_logits_use_the_source_vocabulary(source_dir, corpus_bert):
    model = build_trelm(source_dir, corpus_bert).model.eval()
    h = torch.randn(3, 64)
    src = BertForMaskedLM.from_pretrained(source_dir).eval()
    assert lm_logits(model, h, ENGLISH).shape == (3, SOURCE_VOCAB)
    assert torch.allclose(lm_logits(model, h, ENGLISH), src.cls(h), atol=1e-5)  # head copied from the source
    assert lm_logits(model, h, TARGET).shape == (3, model.config.vocab_size)


def test_a_source_whose_head_is_untied_is_refused(tmp_path, source_dir, corpus_bert):
    """TreLM's English head is a decoder tied to the English word rows (``lm_logits``); a source that unties its
    head has a decoder matrix of its own, which the build would silently drop: one line naming the source."""
    import json
    import shutil
    untied = tmp_path / "untied"
    shutil.copytree(source_dir, untied)
    config = json.loads((untied / "config.json").read_text())
    (untied / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    with pytest.raises(ConfigError) as e:
        build_trelm(untied, corpus_bert)
    assert str(e.value).startswith("config key 'model.method': trelm predicts English through a decoder tied to "
                                   "the source's word rows") and \
        f"but {untied}'s config.json unties its head (tie_word_embeddings: false)" in str(e.value)


# --- parallel shards and the unified batch ---------------------------------------------------------------

def test_cdlm_rows_follow_the_alignment(tmp_path, source_dir, corpus_bert):
    manifest, corpus = write_parallel(tmp_path / "par", corpus_bert)
    stream = trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, manifest, parallel_micro_batch=3))
    batch = next(stream)
    L, Bm = 32, 2
    assert batch["input_ids"].shape == (Bm + 3, L)
    assert batch["input_lang"].tolist() == [TARGET] * Bm + [ENGLISH] * 3
    assert torch.equal(batch["order"][:Bm], torch.arange(L).expand(Bm, L))
    k = int(stream.corpus.permutation(0)[0])  # the first CdLM row is pair perm_0[0]
    src, tgt, t2s = corpus.src[k][:L - 2], corpus.tgt[k][:L - 2], corpus.t2s[k][:L - 2]
    row = batch["input_ids"][Bm]
    assert row[0] == 2 and row[1 + len(src)] == 3 and row[1:1 + len(src)].tolist() == src.tolist()  # [CLS] src [SEP]
    order = batch["order"][Bm]
    expect = [0] + [int(a) + 1 if 0 <= a < len(src) else -1 for a in t2s] + [len(src) + 1]
    assert order[:len(tgt) + 2].tolist() == expect and (order[len(tgt) + 2:] == -1).all()
    assert batch["output_mask"][Bm].sum() == len(tgt) + 2 and batch["attention_mask"][Bm].sum() == len(src) + 2
    first = batch["cdlm_positions"] < (Bm + 1) * L
    assert batch["cdlm_positions"][first].tolist() == list(range(Bm * L + 1, Bm * L + len(tgt) + 2))
    assert batch["cdlm_targets"][first].tolist() == tgt.tolist() + [3]  # every target piece, then [SEP]


def test_parallel_stream_resumes_exactly_and_shards_by_rank(tmp_path, source_dir, corpus_bert):
    manifest, _ = write_parallel(tmp_path / "par", corpus_bert)
    cfg = trelm_train_config(tmp_path, source_dir, corpus_bert, manifest)
    straight = trelm_stream(cfg)
    batches = [next(straight) for _ in range(25)]  # 25 x 2 pairs: past the first epoch of 40 pairs
    resumed = trelm_stream(cfg)
    for _ in range(3):
        next(resumed)
    state = resumed.state_dict()
    assert state == {"sequences": 6, "pairs": 6, "seq_len": cfg.data.seq_len}
    again = trelm_stream(cfg)
    again.load_state_dict(state)
    for want in batches[3:]:
        got = next(again)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    # two ranks with one pair each see, between them, the pairs one rank sees two at a time
    ranks = [trelm_stream(cfg, rank=r, world=2, micro=1) for r in range(2)]
    for want in batches[:3]:
        rows = [next(s)["input_ids"][1] for s in ranks]
        assert torch.equal(torch.stack(rows), want["input_ids"][2:])


def test_objective_loss_and_gradients(tmp_path, source_dir, corpus_bert):
    manifest, _ = write_parallel(tmp_path / "par", corpus_bert)
    batch = next(trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, manifest)))
    batch.pop("seq_ids")
    objective = TreLMObjective(build_trelm(source_dir, corpus_bert).model)
    loss = objective(**batch)
    assert torch.isfinite(loss) and loss > 0
    loss.backward()
    grads = {n: p.grad for n, p in objective.named_parameters()}
    for name in ("hf.trelm.trilayer.attention.self.query.weight", "hf.trelm.placeholder",
                 "hf.trelm.language_embeddings.weight", "hf.trelm.source_word_embeddings.weight",
                 "hf.bert.encoder.layer.0.output.dense.weight", "hf.bert.encoder.layer.3.output.dense.weight"):
        assert grads[name] is not None and grads[name].abs().sum() > 0, name
    assert (grads["hf.trelm.language_embeddings.weight"].abs().sum(1) > 0).all()  # both rows used
    mlm_only = objective(batch["input_ids"][:2], batch["mlm_positions"], batch["mlm_targets"])
    assert 0 < mlm_only < loss  # the CdLM term adds to the MLM term
    logits = objective(batch["input_ids"][:2], batch["mlm_positions"], batch["mlm_targets"], return_logits=True)
    assert logits.shape == (batch["mlm_positions"].numel(), 200)


def test_parallel_shards_config_errors(tmp_path, source_dir, corpus_bert):
    cfg = base_config(tmp_path / "run", source_dir, corpus_bert)
    cfg["data"]["parallel_shards"] = ["x.tar"]
    with pytest.raises(ConfigError, match="data.parallel_shards.*xpt"):
        load_config(str(write_config(tmp_path / "a.yaml", cfg)))
    cfg["model"]["method"] = "trelm"
    cfg["data"]["parallel_micro_batch"] = -1
    with pytest.raises(ConfigError, match="data.parallel_micro_batch"):
        load_config(str(write_config(tmp_path / "b.yaml", cfg)))
    with pytest.raises(ConfigError, match="data.parallel_shards.*not a parallel manifest"):
        trelm_stream(trelm_train_config(tmp_path, source_dir, corpus_bert, corpus_bert / "manifest.json"))


def test_trelm_trains_through_the_entry_point(tmp_path, source_dir, corpus_bert):
    manifest, _ = write_parallel(tmp_path / "par", corpus_bert)
    cfg = base_config(tmp_path / "run", source_dir, corpus_bert,
                      phases=[{"name": "all", "steps": 3, "lr": 1e-3, "warmup_steps": 1}])
    cfg["model"]["method"] = "trelm"
    cfg["data"].update(parallel_shards=[f"{manifest}:train"], parallel_micro_batch=2, num_workers=0)
    cfg["logging"]["eval_every"] = 3
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(tmp_path / "run")
    assert all(np.isfinite(rows[s]["train/loss"]) for s in (1, 2, 3))
    assert np.isfinite(rows[3]["valid/loss"])
    assert rows[1]["train/loss"] > rows[3]["valid/loss"] + 3  # the CdLM term (~ln 200 untrained) is in the loss
    client = checkpoint.read_client_state(tmp_path / "run/checkpoints", tag_for(3))
    assert client["data"] == {"sequences": 3 * 2 * 2, "pairs": 3 * 2 * 2, "seq_len": 32}  # 3 steps x grad_accum 2 x 2 each


def test_evaluate_runs_trelm_through_the_trilayer(source_dir, corpus_bert):
    from xpt_ds.evaluation.intrinsic import evaluate
    built = build_trelm(source_dir, corpus_bert)
    tok = build_tokenizer(str(corpus_bert / "spm.model"))
    data = DataConfig(seq_len=32)
    shards = [f"{corpus_bert}/manifest.json:valid"]
    with_trilayer = evaluate(built.model, tok, data, shards, batch_size=2, max_batches=2)
    del built.model.trelm  # what a stock model of the same weights scores
    stock = evaluate(built.model, tok, data, shards, batch_size=2, max_batches=2)
    assert with_trilayer["tokens"] == stock["tokens"] > 0 and with_trilayer["loss"] != pytest.approx(stock["loss"])
