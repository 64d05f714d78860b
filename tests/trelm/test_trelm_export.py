"""TreLM's export and ZeRO-3 (issue 12 §6): stock ``AutoModelForMaskedLM(trust_remote_code=True)`` on the
exported directory gives the training model's target MLM logits (BERT and RoBERTa layouts); a short trelm run
with every parameter partitioned by ZeRO-3 trains, exports, and ``evaluate --model`` equals ``--run``."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer

from conftest import base_config, free_port, launch, read_metrics, write_config
from trelm_builders import write_parallel
from xpt_ds.export.hf import save_model
from xpt_ds.config import ModelConfig
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.cli.evaluate import main as evaluate_main
from xpt_ds.cli.export import main as export_main
from xpt_ds.model.build import build_model
from xpt_ds.trelm.objective import TreLMObjective


def _trained_looking(source, corpus):
    """A trelm model whose TreLM parts are moved off their initial values (the TRILayer off its copy of layer
    N/2-1, both language rows, the token types), so a conversion that drops or misplaces one shows."""
    cfg = ModelConfig(source=str(source), tokenizer=str(corpus / "spm.model"), method="trelm")
    model = build_model(cfg, build_tokenizer(cfg.tokenizer)).model.eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("trelm.") or "token_type" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


def _training_logits(model, ids, mask):
    """[B, T, V] target MLM logits of every position through the training objective (identity order)."""
    B, T = ids.shape
    with torch.no_grad():
        logits = TreLMObjective(model)(ids, torch.arange(B * T), torch.zeros(B * T, dtype=torch.long),
                                       attention_mask=mask, return_logits=True)
    return logits.reshape(B, T, -1)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_export_gives_the_training_logits(family, tmp_path, request):
    source = request.getfixturevalue("source_dir" if family == "bert" else "tiny_roberta")
    corpus = request.getfixturevalue("corpus_bert" if family == "bert" else "corpus")
    model = _trained_looking(source, corpus)
    pad = model.config.pad_token_id
    ids = torch.randint(5, model.config.vocab_size, (2, 12))
    ids[1, 8:] = pad
    mask = (ids != pad).long()
    want = _training_logits(model, ids, mask)

    out = tmp_path / "exported"
    out.mkdir()
    save_model(model, out)
    exported = AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True).eval()
    assert type(exported).__name__ == f"XptTreLM{type(model).__name__}"
    assert not any(n.startswith("trelm.") or "source" in n for n, _ in exported.named_parameters())
    with torch.no_grad():
        got = exported(input_ids=ids, attention_mask=mask).logits
        stock = AutoModelForMaskedLM.from_pretrained(out).eval()(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    # Not bitwise: the folded row is added to the token types before the words, training adds it after.
    assert torch.allclose(got[real], want[real], atol=2e-5), (got[real] - want[real]).abs().max()
    assert not torch.allclose(stock[real], want[real], atol=1e-2)  # without remote code: no TRILayer
    # The bare encoder and a task head run the same TRILayer.
    bare = AutoModel.from_pretrained(out, trust_remote_code=True).eval()
    task = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True, num_labels=2).eval()
    with torch.no_grad():
        hidden = getattr(exported, exported.base_model_prefix)(input_ids=ids, attention_mask=mask).last_hidden_state
        assert torch.equal(bare(input_ids=ids, attention_mask=mask).last_hidden_state, hidden)
        encoder = getattr(task, task.base_model_prefix)
        assert torch.equal(encoder(input_ids=ids, attention_mask=mask).last_hidden_state, hidden)


ZERO3_EVERYTHING = {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
                    "bf16": {"enabled": False}}


def test_zero3_run_exports_and_evaluates_like_its_checkpoint(tmp_path, source_dir, corpus_bert):  # noqa: F811
    """A trelm run with CdLM rows (which read the placeholder) under ZeRO-3 with no persistent parameters trains,
    validates and checkpoints; its export, loaded by stock transformers, scores as ``--run`` does."""
    manifest, _ = write_parallel(tmp_path / "par", corpus_bert)
    ds = tmp_path / "zero3.json"
    ds.write_text(json.dumps(ZERO3_EVERYTHING))
    run = tmp_path / "run"
    cfg = base_config(run, source_dir, corpus_bert, deepspeed=str(ds),
                      phases=[{"name": "all", "steps": 2, "lr": 1e-3, "warmup_steps": 1}])
    cfg["model"]["method"] = "trelm"
    cfg["data"].update(parallel_shards=[f"{manifest}:train"], parallel_micro_batch=2, num_workers=0)
    cfg["logging"].update(eval_every=2, eval_batches=0)
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = read_metrics(run)[2]
    assert torch.isfinite(torch.tensor(final["train/loss"]))

    out = tmp_path / "exported"
    assert export_main(["--run", str(run), "--out", str(out)]) == 0
    assert (out / "xpt_trelm.py").is_file()
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.mask_token == "[MASK]"
    results = {}
    for flag, value in (("--run", run), ("--model", out)):
        res = tmp_path / f"eval{flag}.json"
        assert evaluate_main([flag, str(value), "--shards", f"{corpus_bert}/manifest.json:valid", "--seq-len", "32",
                              "--out", str(res)]) == 0
        results[flag] = json.loads(res.read_text())
    ckpt, export = results["--run"], results["--model"]
    assert ckpt["loss"] == pytest.approx(final["valid/loss"], rel=1e-5)  # the run's own ZeRO-3 validation
    assert export["tokens"] == ckpt["tokens"] > 0 and export["words"] == ckpt["words"]
    for k in ("loss", "hits@1", "mrr", "mr", "bits_per_char", "bits_per_word"):
        assert export[k] == pytest.approx(ckpt[k], rel=1e-5), k


def test_zero3_gathers_what_trelm_reads_outside_a_submodules_forward():
    """The placeholder and the English decoder's weight and bias, read outside the engine's forward (scoring
    with ``engine.module``), are gathered by the module that reads them."""
    from conftest import run_main
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0", "WORLD_SIZE": "1",
           "LOCAL_RANK": "0"}  # a world of one, forked: the engine's process group stays out of this process
    proc = run_main("trelm_zero3_outside", [], env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_without_trilayer_exports_a_stock_model(tmp_path, source_dir, corpus_bert):  # noqa: F811
    """004 Table 7's "w/o TRILayer" (method trelm_no_tri): no TRILayer or placeholder, no @trilayer group, encode
    refuses an order, CdLM is a config error; its export is a stock model with the target row folded into the
    token types, which stock transformers loads without remote code and which gives the training logits."""
    from xpt_ds.config import ConfigError, load_config
    from xpt_ds.trelm.model import encode
    cfg = ModelConfig(source=str(source_dir), tokenizer=str(corpus_bert / "spm.model"), method="trelm_no_tri")
    built = build_model(cfg, build_tokenizer(cfg.tokenizer))
    model = built.model.eval()
    assert model.trelm.trilayer is None and model.trelm.placeholder is None
    assert not any("trilayer" in n or "placeholder" in n for n in built.tags)
    assert not any("@trilayer" in t for t in built.tags.values())
    assert {n for n, t in built.tags.items() if "@lang" in t} == {"trelm.language_embeddings.weight"}
    assert len(model.bert.encoder.layer) == 4  # the source's layers, nothing inserted
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("trelm.language") or "token_type" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    pad = model.config.pad_token_id
    ids = torch.randint(5, model.config.vocab_size, (2, 12))
    ids[1, 8:] = pad
    mask = (ids != pad).long()
    with pytest.raises(ValueError, match="no TRILayer"):
        encode(model, ids, mask, order=torch.arange(12).flip(0).expand(2, 12))
    want = _training_logits(model, ids, mask)

    out = tmp_path / "exported"
    out.mkdir()
    save_model(model, out)
    assert not (out / "xpt_trelm.py").exists() and "auto_map" not in json.loads((out / "config.json").read_text())
    exported = AutoModelForMaskedLM.from_pretrained(out).eval()
    assert type(exported) is type(model)
    with torch.no_grad():
        got = exported(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert torch.allclose(got[real], want[real], atol=2e-5), (got[real] - want[real]).abs().max()

    manifest, _ = write_parallel(tmp_path / "par", corpus_bert)
    run_cfg = base_config(tmp_path / "run", source_dir, corpus_bert,
                          phases=[{"name": "all", "steps": 2, "objectives": ["mlm_target", "cdlm_en_x"]}])
    run_cfg["model"]["method"] = "trelm_no_tri"
    run_cfg["data"]["parallel_shards"] = [f"{manifest}:train"]
    with pytest.raises(ConfigError, match=r"phases\[0\].objectives.*cdlm_en_x.*no TRILayer"):
        load_config(str(write_config(tmp_path / "cfg.yaml", run_cfg)))
