"""TreLM's three phases (004 §3.2-3.3, Alg. 1): per-phase objectives (config checks, the X->en CdLM rows and loss,
the composite stream's state) and the shipped config launch/configs/trelm_three_phase.yaml through the real entry
point: on one rank (frozen halves, the merge), and resumed inside the X->en branch on two."""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from transformers import BertForMaskedLM

from conftest import launch, read_metrics, read_phase_end, write_config
from conftest import SOURCE_VOCAB
from trelm_builders import SHIPPED, build_trelm, three_phase_config, trelm_train_config, write_pairs, write_parallel
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.phase_ends import PHASE_ENDS
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.config import ConfigError, OptimConfig, load_config
from xpt_ds.config.phase_checks import phase_objectives
from xpt_ds.data.mlm import build_streams
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.model.forward.objective import strip_prefix
from xpt_ds.trelm.data import build_trelm_stream
from xpt_ds.trelm.model import ENGLISH, TARGET, encode, lm_logits
from xpt_ds.trelm.objective import TreLMObjective

ALL = ["mlm_target", "mlm_source", "cdlm_en_x", "cdlm_x_en"]


def _config(tmp_path, method="trelm", objectives=(), **data) -> str:
    cfg = {"model": {"source": "src", "tokenizer": "spm.model", "method": method},
           "phases": [{"name": "a", "steps": 1, **({"objectives": list(objectives)} if objectives else {})}],
           "data": {"train_shards": ["train.tar"], **data}}
    return str(write_config(tmp_path / "cfg.yaml", cfg))


@pytest.mark.parametrize("method, objectives, data, message", [
    ("trelm", ["mlm_target", "tlm"], {}, "'phases[0].objectives' has 'tlm'; valid: mlm_target, mlm_source"),
    ("trelm", ["mlm_target", "mlm_target"], {}, "'phases[0].objectives' names an objective twice"),
    ("trelm", ["cdlm_en_x"], {"parallel_shards": ["p.tar"]}, "'phases[0].objectives' lacks mlm_target"),
    ("xpt", ["mlm_target", "cdlm_en_x"], {}, "has 'cdlm_en_x' but model.method 'xpt' trains target MLM only"),
    ("trelm", ["mlm_target", "mlm_source"], {}, "has 'mlm_source', which reads config key 'data.source_shards', "
                                                "but that is empty"),
    ("trelm", ["mlm_target", "cdlm_x_en"], {"source_shards": ["e.tar"]}, "has 'cdlm_x_en', which reads config key "
                                                                         "'data.parallel_shards', but that is empty"),
    ("trelm", [], {"source_shards": ["e.tar"]}, "'data.source_shards' is set but no phase's objectives list "
                                                "mlm_source"),
    ("trelm", ["mlm_target"], {"parallel_shards": ["p.tar"]}, "'data.parallel_shards' is set but no phase's "
                                                              "objectives list cdlm_en_x or cdlm_x_en"),
    ("xpt", [], {"source_shards": ["e.tar"]}, "'data.source_shards' is set but model.method 'xpt' reads no English"),
    ("trelm", ["mlm_target"], {"parallel_valid_shards": ["v.tar"]}, "'data.parallel_valid_shards' is set but no "
                                                                    "phase's objectives list cdlm_en_x or cdlm_x_en"),
])
def test_objective_config_errors_name_the_key(tmp_path, method, objectives, data, message):
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, method, objectives, **data))
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_default_objectives_are_the_single_phase_ones(tmp_path):
    assert phase_objectives(load_config(_config(tmp_path, "xpt")), 0) == ["mlm_target"]
    assert phase_objectives(load_config(_config(tmp_path)), 0) == ["mlm_target"]
    trelm = load_config(_config(tmp_path, parallel_shards=["p.tar"]))
    assert phase_objectives(trelm, 0) == ["mlm_target", "cdlm_en_x"]
    shipped = load_config(str(SHIPPED))
    assert [phase_objectives(shipped, i) for i in range(4)] == [
        ["mlm_target", "mlm_source"], ["mlm_target", "cdlm_en_x"], ["mlm_target", "cdlm_x_en"], ["mlm_target"]]


def _stream(cfg, objectives, rank=0, world=1, micro=2):
    cfg = dataclasses.replace(cfg, optim=OptimConfig(micro_batch_size=micro))
    tok = build_tokenizer(cfg.model.tokenizer)
    mlm, _ = build_streams(cfg.data, tok, micro, rank, world)
    stream = build_trelm_stream(mlm, cfg, tok, SOURCE_VOCAB, rank, world)
    stream.use(objectives)
    return stream


def test_x_en_rows_and_loss_predict_english_at_the_aligned_positions(tmp_path, source_dir, corpus_bert):
    """One hand-made pair: English [7 8 9 10], target [20 21 22], English piece i read from target piece s2t[i]."""
    from data_tools.pairs.parallel_shards import AlignedCorpus
    s2t = np.array([2, 0, -1, 1])
    pairs = AlignedCorpus([np.array([7, 8, 9, 10])], [np.array([20, 21, 22])], [s2t], [np.array([1, -1, 0])],
                          docs=["0"])
    manifest = write_pairs(tmp_path / "par", corpus_bert, pairs)
    cfg = trelm_train_config(tmp_path, source_dir, corpus_bert, manifest, parallel_micro_batch=1)
    batch = next(_stream(cfg, ["mlm_target", "cdlm_x_en"], micro=1))
    L = 32  # row 0: target MLM, row 1: the pair; BERT layout on both sides: [PAD]=0 [CLS]=2 [SEP]=3
    pad = [0] * (L - 5)
    assert batch["input_ids"][1].tolist() == [2, 20, 21, 22, 3] + pad  # the target sentence is the input
    assert batch["order"][1].tolist() == [0, 3, 1, -1, 2, 4] + [-1] * (L - 6)  # cls, s2t + 1, placeholder, sep
    assert batch["attention_mask"][1].sum() == 5 and batch["output_mask"][1].tolist() == [1] * 6 + [0] * (L - 6)
    assert batch["input_lang"].tolist() == [TARGET, TARGET] and batch["output_lang"].tolist() == [TARGET, ENGLISH]
    assert batch["cdlm_x_en_positions"].tolist() == [L + 1, L + 2, L + 3, L + 4, L + 5]
    assert batch["cdlm_x_en_targets"].tolist() == [7, 8, 9, 10, 3]  # every English piece, then the English [SEP]
    assert "cdlm_positions" not in batch and "mlm_source_positions" not in batch

    model = build_trelm(source_dir, corpus_bert).model.eval()
    batch.pop("seq_ids")
    with torch.no_grad():
        loss = TreLMObjective(model)(**batch)
        hidden = encode(model, batch["input_ids"], batch["attention_mask"], batch["input_lang"], batch["order"],
                        batch["output_mask"], batch["output_lang"])
        mlm = F.cross_entropy(lm_logits(model, hidden.flatten(0, 1)[batch["mlm_positions"]], TARGET),
                              batch["mlm_targets"])
        english = F.cross_entropy(lm_logits(model, hidden[1, 1:6], ENGLISH), torch.tensor([7, 8, 9, 10, 3]))
        through_target_head = F.cross_entropy(lm_logits(model, hidden[1, 1:6], TARGET), torch.tensor([7, 8, 9, 10, 3]))
    torch.testing.assert_close(loss, mlm + english, rtol=1e-6, atol=1e-6)
    assert abs(float(english - through_target_head)) > 1e-3  # the head matters: the check above can fail


def test_stream_state_holds_every_sub_stream(tmp_path, source_dir, corpus_bert, english):
    manifest, _ = write_parallel(tmp_path / "par", corpus_bert)
    cfg = trelm_train_config(tmp_path, source_dir, corpus_bert, manifest)
    cfg.data = dataclasses.replace(cfg.data, source_shards=[f"{english}:train"])
    straight = _stream(cfg, ALL)
    batches = [next(straight) for _ in range(5)]
    assert straight.state_dict() == {"sequences": 10, "pairs": 10, "source_sequences": 10, "seq_len": 32}
    assert {"mlm_positions", "mlm_source_positions", "cdlm_positions", "cdlm_x_en_positions"} <= batches[0].keys()
    assert batches[0]["input_lang"].tolist() == [TARGET] * 2 + [ENGLISH] * 4 + [TARGET] * 2
    assert batches[0]["output_lang"].tolist() == [TARGET] * 2 + [ENGLISH] * 2 + [TARGET] * 2 + [ENGLISH] * 2
    # a phase that does not read a sub-stream leaves its position alone, and the state still holds it
    target_only = _stream(cfg, ["mlm_target"])
    target_only.load_state_dict(straight.state_dict())
    next(target_only)
    assert target_only.state_dict() == {"sequences": 12, "pairs": 10, "source_sequences": 10, "seq_len": 32}
    resumed = _stream(cfg, ALL)
    resumed.load_state_dict({"sequences": 4, "pairs": 4, "source_sequences": 4})
    for want in batches[2:]:
        got = next(resumed)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    # two ranks with one row of each kind see, between them, the rows one rank sees two at a time
    ranks = [_stream(cfg, ALL, rank=r, world=2, micro=1) for r in range(2)]
    for r in ranks:
        r.load_state_dict({"sequences": 4, "pairs": 4, "source_sequences": 4})
    for want in batches[2:]:
        rows = torch.stack([next(r)["input_ids"] for r in ranks], 1).flatten(0, 1)  # interleave the ranks' rows
        assert torch.equal(rows, want["input_ids"])


def _end(run, name):
    blob = read_phase_end(run / "checkpoints", name)
    return strip_prefix(blob["weights"]), blob["data"]


def _differ(a, b, names):
    return [n for n in names if not torch.equal(a[n], b[n])]


def test_three_phase_config_trains_end_to_end(tmp_path, source_dir, corpus_bert, english):
    """One rank. The last phase trains only @lang, so every other weight of the final checkpoint is the merge."""
    parallel, _ = write_parallel(tmp_path / "par", corpus_bert)
    run = tmp_path / "run"
    proc = launch(["--config", str(three_phase_config(run, source_dir, corpus_bert, english, parallel, ["@lang"]))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "phase 'common' trains" in proc.stderr and "on mlm_target, mlm_source" in proc.stderr
    assert "phase 'x_en' starts at global step 4 from the end of 'common'; trains on mlm_target, cdlm_x_en" in \
        proc.stderr
    (common, common_data), (en_x, en_x_data), (x_en, x_en_data) = (_end(run, p) for p in ("common", "en_x", "x_en"))
    # 2 steps x grad_accum 2 x 2 rows of each kind; x_en rewinds every sub-stream to common's end, as en_x did
    assert common_data == {"sequences": 8, "pairs": 0, "source_sequences": 8, "seq_len": 32}
    assert en_x_data == x_en_data == {"sequences": 16, "pairs": 8, "source_sequences": 8, "seq_len": 32}
    names = list(common)
    lower = [n for n in names if n.startswith(("bert.encoder.layer.0.", "bert.encoder.layer.1."))]
    upper = [n for n in names if n.startswith(("bert.encoder.layer.2.", "bert.encoder.layer.3."))]
    source = BertForMaskedLM.from_pretrained(source_dir).state_dict()
    assert _differ(common, source, lower + upper) == []  # commonality keeps the encoder layers
    assert _differ(en_x, common, lower) == [] and _differ(x_en, common, upper) == []  # each branch's frozen half
    assert _differ(en_x, common, upper) == upper and _differ(x_en, common, lower) == lower  # ... and trained half
    final = load_checkpoint_fp32(run / "checkpoints", tag_for(8))
    lang = "trelm.language_embeddings.weight"
    rest = [n for n in names if n not in lower + upper + [lang]]
    assert _differ(final, x_en, lower) == [] and _differ(final, en_x, upper) == []
    assert _differ(final, {n: (en_x[n] + x_en[n]) / 2 for n in rest}, rest) == []
    assert "trelm.trilayer.attention.self.query.weight" in _differ(en_x, x_en, rest)  # the average is not vacuous
    assert np.isfinite(read_metrics(run)[8]["train/loss"])


@pytest.fixture(scope="module")
def straight(tmp_path_factory, source_dir, corpus_bert, english):
    """The three phases on 2 ranks, checkpoints at global step 5 (inside x_en) and at the phase ends."""
    root = tmp_path_factory.mktemp("trelm_phases")
    parallel, _ = write_parallel(root / "par", corpus_bert)
    run = root / "straight"
    proc = launch(["--config", str(three_phase_config(run, source_dir, corpus_bert, english, parallel, every_steps=5))],
                  nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run, parallel


@pytest.mark.multiproc
def test_resume_inside_the_x_en_branch_is_bit_identical(straight, tmp_path, source_dir, corpus_bert, english):
    """Stopped after x_en's first step (global step 5): the job restarts from that checkpoint and the kept phase
    ends, and finishes with the uninterrupted run's losses and weights."""
    full, parallel = straight
    run, cut = tmp_path / "run", 5
    shutil.copytree(full / "checkpoints" / tag_for(cut), run / "checkpoints" / tag_for(cut))
    shutil.copytree(full / "checkpoints" / PHASE_ENDS, run / "checkpoints" / PHASE_ENDS)
    proc = launch(["--config", str(three_phase_config(run, source_dir, corpus_bert, english, parallel, every_steps=5))],
                  nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(cut)}: phase 2 step 1" in proc.stderr
    want, got = read_metrics(full), read_metrics(run)
    assert sorted(got) == [6, 7, 8]
    assert [got[s]["train/loss"] for s in got] == [want[s]["train/loss"] for s in got]
    a, b = (load_checkpoint_fp32(r / "checkpoints", tag_for(8)) for r in (full, run))
    assert _differ(a, b, a) == []


def test_without_cdlm_or_trilayer_trains_the_three_phases(tmp_path, source_dir, corpus_bert, english):
    """004 Table 7's "w/o CdLM & w/o TRILayer" through the entry point: method trelm_no_tri, the branches on
    English MLM instead of CdLM (target and English MLM rows in one batch, both in the identity order)."""
    run = tmp_path / "run"
    cfg = yaml.safe_load(three_phase_config(run, source_dir, corpus_bert, english, corpus_bert).read_text())
    cfg["model"]["method"] = "trelm_no_tri"
    cfg["data"]["parallel_shards"] = []
    for phase in cfg["phases"][1:3]:
        phase["objectives"] = ["mlm_target", "mlm_source"]
    proc = launch(["--config", str(write_config(tmp_path / "no_tri.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "phase 'x_en' starts at global step 4 from the end of 'common'; trains on mlm_target, mlm_source" in \
        proc.stderr
    losses = [r["train/loss"] for _, r in sorted(read_metrics(run).items())]
    assert len(losses) == 8 and np.isfinite(losses).all()
    assert not any("trilayer" in n for n in load_checkpoint_fp32(run / "checkpoints", tag_for(8)))


# --- CdLM validation and the throughput of every row -----------------------------------------------------------

def _with_valid_split(manifest, pairs: int = 10, seed: int = 3):
    """Random pairs as the manifest's valid split, beside its train split (as data_tools.cli.parallel writes both)."""
    import json
    from data_tools.pairs.parallel_shards import AlignedCorpus, write_split
    rng = np.random.default_rng(seed)
    src = [rng.integers(5, SOURCE_VOCAB, int(rng.integers(2, 40))) for _ in range(pairs)]
    tgt = [rng.integers(5, 200, int(rng.integers(2, 40))) for _ in range(pairs)]
    corpus = AlignedCorpus(src, tgt, [rng.integers(-1, len(t), len(s)) for s, t in zip(src, tgt)],
                           [rng.integers(-1, len(s), len(t)) for s, t in zip(src, tgt)],
                           docs=[str(k) for k in range(pairs)])
    meta = json.loads(manifest.read_text())
    meta["splits"]["valid"] = write_split(manifest.parent, "valid", corpus, np.arange(pairs),
                                          corpus.dtypes(SOURCE_VOCAB, 200), shard_pairs=4)
    manifest.write_text(json.dumps(meta))
    return corpus


def _row_flops(hf, n_in, n_out, layers_in, layers_out):
    d, ff = hf.hidden_size, hf.intermediate_size
    layer = lambda n: 6 * (4 * d * d + 2 * d * ff) * n + 12 * d * n * n  # noqa: E731
    return layers_in * layer(n_in) + layers_out * layer(n_out) + 6 * d * d * n_out


def test_micro_batch_work_counts_every_rank_s_rows_at_their_real_lengths(tmp_path, source_dir, corpus_bert,
                                                                          english):
    """Tokens: every row's real input (the unified batch's attention mask), on every rank; FLOPs: the lower half
    (2 of 4 layers) on the input, the TRILayer and the upper half on the output, each head on its predictions."""
    from xpt_ds.metrics.logger import flops_per_token, rows_flops
    from xpt_ds.trelm.work import micro_batch_work
    manifest, _ = write_parallel(tmp_path / "par", corpus_bert, seed=2)  # seed 2: pairs shorter than 30 pieces
    cfg = trelm_train_config(tmp_path, source_dir, corpus_bert, manifest)  # as many pairs as MLM rows per micro-batch
    cfg.data = dataclasses.replace(cfg.data, source_shards=[f"{english}:train"])
    hf = build_trelm(source_dir, corpus_bert).model.config
    one = _stream(cfg, ALL, micro=2)
    batch = next(one)
    tokens, flops = micro_batch_work(hf, one.last_rows)
    assert tokens == int(batch["attention_mask"].sum()) < 8 * 32  # 2 + 2 MLM rows of 32, 2 + 2 CdLM rows shorter
    n_in, n_out = batch["attention_mask"].sum(1).tolist(), batch["output_mask"].sum(1).tolist()
    heads = 6 * 64 * (200 * (0.15 * 32 * 2 + len(batch["cdlm_targets"]))
                      + SOURCE_VOCAB * (0.15 * 32 * 2 + len(batch["cdlm_x_en_targets"])))
    assert flops == pytest.approx(sum(_row_flops(hf, i, o, 2, 3) for i, o in zip(n_in, n_out)) + heads, rel=1e-12)
    # each of two ranks holds half the rows and counts all of them
    ranks = [_stream(cfg, ALL, rank=r, world=2, micro=1) for r in range(2)]
    masks = [next(r)["attention_mask"].sum() for r in ranks]
    assert [micro_batch_work(hf, r.last_rows) for r in ranks] == [(tokens, pytest.approx(flops, rel=1e-12))] * 2
    assert int(sum(masks)) == tokens
    # XPT's figure is the same convention for a packed row of T tokens
    assert rows_flops(hf, [32], [32], 4, 0, {200: 0.15 * 32}) == pytest.approx(flops_per_token(hf, 32, 0.15) * 32)


def test_cdlm_validation_and_every_row_s_throughput(tmp_path, source_dir, corpus_bert, english):
    """The three phases with validation of target MLM and of both CdLM directions (data.parallel_valid_shards)
    at every eval point, and tokens_seen / tokens_per_s / MFU over every row; the same run without validation
    trains the same losses and weights (validation moves no data position and no RNG)."""
    import json
    parallel, _ = write_parallel(tmp_path / "par", corpus_bert, seed=2)
    _with_valid_split(parallel)
    metrics = {}
    for name in ("plain", "valid"):
        run = tmp_path / name
        cfg = yaml.safe_load(three_phase_config(run, source_dir, corpus_bert, english, parallel).read_text())
        cfg["logging"]["peak_tflops"] = 1.0
        if name == "valid":
            cfg["data"].update(valid_shards=[f"{corpus_bert}/manifest.json:valid"],
                               parallel_valid_shards=[f"{parallel}:valid"])
            cfg["logging"].update(eval_every=3, eval_batches=0)
        proc = launch(["--config", str(write_config(tmp_path / f"{name}.yaml", cfg))])
        assert proc.returncode == 0, proc.stderr[-3000:]
        metrics[name] = read_metrics(run)
    plain, valid = metrics["plain"], metrics["valid"]
    assert [plain[s]["train/loss"] for s in range(1, 9)] == [valid[s]["train/loss"] for s in range(1, 9)]
    a, b = (load_checkpoint_fp32(tmp_path / n / "checkpoints", tag_for(8)) for n in ("plain", "valid"))
    assert _differ(a, b, a) == []
    evals = sorted(s for s, r in valid.items() if "valid/loss" in r)
    assert evals == [2, 3, 4, 6, 8] and not any("valid/cdlm_en_x/loss" in r for r in plain.values())
    for s in evals:  # 10 pairs, 2 per batch: all of them; a direction is scored in every phase
        for direction in ("cdlm_en_x", "cdlm_x_en"):
            loss = valid[s][f"valid/{direction}/loss"]
            assert np.isfinite(loss) and valid[s][f"valid/{direction}/ppl"] == pytest.approx(np.exp(loss))
            assert 0 <= valid[s][f"valid/{direction}/hits@1"] <= 1
    assert valid[4]["valid/cdlm_en_x/loss"] != valid[2]["valid/cdlm_en_x/loss"]

    # tokens of every row: per step 2 x 2 target rows of 32; common adds as many English rows; en_x and x_en the
    # same 8 pairs (x_en rewinds to common's end) at their real input lengths, English side then target side
    cfg_obj = trelm_train_config(tmp_path, source_dir, corpus_bert, parallel, parallel_micro_batch=2)
    en_x, x_en = (_stream(cfg_obj, ["mlm_target", d]) for d in ("cdlm_en_x", "cdlm_x_en"))
    micro = [[int(next(s)["attention_mask"][2:].sum()) for _ in range(4)] for s in (en_x, x_en)]
    pairs = [m[0] + m[1] for m in micro] + [m[2] + m[3] for m in micro]  # steps 3 and 5, then 4 and 6
    per_step = [256, 256, 128 + pairs[0], 128 + pairs[2], 128 + pairs[1], 128 + pairs[3], 128, 128]
    assert sum(pairs) < 4 * 8 * 32  # real lengths: shorter than full rows
    seen = np.cumsum(per_step)
    assert [valid[s]["train/tokens_seen"] for s in range(1, 9)] == seen.tolist()
    status = json.loads((tmp_path / "valid" / "status.json").read_text())
    assert (status["tokens_seen"], status["target_tokens_seen"]) == (int(seen[-1]), 8 * 128)
    # MFU / tokens_per_s = FLOPs per token / peak: more per token in a CdLM branch than in the last phase
    per_token = {s: valid[s]["train/mfu"] * 1e12 / valid[s]["train/tokens_per_s"] for s in range(1, 9)}
    assert per_token[3] != pytest.approx(per_token[8]) and per_token[7] == pytest.approx(per_token[8])
