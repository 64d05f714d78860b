"""CUDA paths on one GPU: bf16 and FusedAdam under every ZeRO stage, exact resume, export on the device, TreLM,
a non-random embedding start, torch.compile, activation checkpointing and fine-tuning (issue 24).
``pytest -m gpu tests/gpu``.

Skipped without CUDA, so CI (CPU) is unchanged. ``XPT_GPU_TESTS_ON_CPU=1`` runs them on the CPU instead
(``DS_ACCELERATOR=cpu``), to rehearse them before GPU time is spent (``benchmarks/gpu_session.sh --rehearse``).
Every run is its own ``python -m xpt_ds.cli.train`` process (never a fork: this process may hold a CUDA context).
Figures the assertions rest on (loss differences, weight differences) go to ``$XPT_GPU_REPORT/*.json`` when
that is set, so a failing run on a lent GPU still says by how much it missed.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from conftest import REPO, free_port, read_metrics
from gpu_builders import ACCELERATOR, ON_CPU, STEPS, gpu_config, gpu_env, losses, report, train
from trelm_builders import write_parallel
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.model.forward.objective import strip_prefix

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not (ON_CPU or torch.cuda.is_available()),
                                                  reason="needs CUDA (XPT_GPU_TESTS_ON_CPU=1 rehearses on CPU)")]


def reused_pairs(source: Path) -> dict[str, str]:
    """Target parameter name -> source parameter name, for every source parameter XPT reuses (2 layers)."""
    from transformers import AutoModelForMaskedLM
    src = AutoModelForMaskedLM.from_pretrained(source).state_dict()
    pairs = {f"roberta.encoder.layer.{i + 1}.{k[len(f'roberta.encoder.layer.{i}.'):]}": k
             for k in src for i in range(2) if k.startswith(f"roberta.encoder.layer.{i}.")}
    kept = ("roberta.embeddings.position", "roberta.embeddings.token_type", "roberta.embeddings.LayerNorm",
            "lm_head.dense", "lm_head.layer_norm")
    pairs |= {k: k for k in src if k.startswith(kept)}
    return pairs


def optimizer_moments(tag_dir: Path) -> int:
    """Elements of every ``exp_avg`` tensor in the tag's files: Adam's first moment, one per trained element."""
    def count(obj) -> int:
        if isinstance(obj, dict):
            return sum(v.numel() if k == "exp_avg" and torch.is_tensor(v) else count(v) for k, v in obj.items())
        if isinstance(obj, (list, tuple)):
            return sum(count(v) for v in obj)
        return 0
    return sum(count(torch.load(f, map_location="cpu", weights_only=False)) for f in tag_dir.glob("*.pt"))


@pytest.mark.parametrize("ds", ["zero0_fp32", "zero1_bf16", "zero2_bf16", "zero3_bf16"])
def test_two_phases_bf16_fused_adam_every_zero_stage(ds, tmp_path, tiny_roberta, corpus):
    """Stage 0 runs fp32: bf16 needs ZeRO >= 1 here (stage 0 keeps no fp32 master; xpt_ds.training.engine)."""
    from transformers import AutoModelForMaskedLM
    cfg = gpu_config(tmp_path, tiny_roberta, corpus, ds)
    train(tmp_path, cfg)
    got = losses(tmp_path / "run")
    report(f"two_phases_{ds}", {"losses": got})
    assert len(got) == 2 * STEPS and all(torch.isfinite(torch.tensor(got)))
    assert sum(got[-2:]) < sum(got[:2]), got

    state = strip_prefix(load_checkpoint_fp32(tmp_path / "run/checkpoints", tag_for(STEPS)))
    src = AutoModelForMaskedLM.from_pretrained(tiny_roberta).state_dict()
    pairs = reused_pairs(tiny_roberta)
    changed = [t for t, s in pairs.items() if not torch.equal(state[t], src[s])]
    assert not changed, changed[:5]  # phase 1: every reused parameter bit-for-bit the source's
    assert not torch.equal(state["roberta.encoder.layer.0.attention.self.query.weight"],
                           state["roberta.encoder.layer.1.attention.self.query.weight"])
    frozen = sum(src[s].numel() for s in pairs.values())
    trainable = sum(v.numel() for k, v in state.items() if k not in pairs and ".decoder." not in k)
    held = optimizer_moments(tmp_path / "run/checkpoints" / tag_for(STEPS))
    report(f"optimizer_state_{ds}", {"frozen": frozen, "trainable": trainable, "exp_avg_elements": held})
    assert trainable <= held < trainable + frozen // 4, (trainable, held, frozen)  # none for the frozen ones

    final = strip_prefix(load_checkpoint_fp32(tmp_path / "run/checkpoints", tag_for(2 * STEPS)))
    assert any(not torch.equal(final[t], src[s]) for t, s in pairs.items())  # phase 2 trains them


@pytest.fixture(scope="module")
def straight(tmp_path_factory, tiny_roberta, corpus) -> Path:
    """ZeRO-2, bf16, FusedAdam, dropout on: a checkpoint after every step."""
    root = tmp_path_factory.mktemp("straight")
    cfg = gpu_config(root, tiny_roberta, corpus, "zero2_bf16", checkpoint={"every_steps": 1})
    cfg["optim"]["torch_adam"] = ON_CPU  # DeepSpeed's CPU FusedAdam is not bitwise exact across a resume
    train(root, cfg)
    return root


@pytest.mark.parametrize("cut", [2, STEPS], ids=["mid-phase1", "boundary"])
def test_resume_is_bit_identical(cut, straight, tmp_path):
    cfg = yaml.safe_load((straight / "cfg.yaml").read_text())
    cfg["run_dir"] = str(tmp_path / "run")
    shutil.copytree(straight / "run/checkpoints" / tag_for(cut), tmp_path / "run/checkpoints" / tag_for(cut))
    proc = train(tmp_path, cfg)
    assert f"resumed from {tag_for(cut)}" in proc.stderr
    want, got = read_metrics(straight / "run"), read_metrics(tmp_path / "run")
    steps = list(range(cut + 1, 2 * STEPS + 1))
    final = tag_for(2 * STEPS)
    a = load_checkpoint_fp32(straight / "run/checkpoints", final)
    b = load_checkpoint_fp32(tmp_path / "run/checkpoints", final)
    report(f"resume_{cut}", {
        "loss_differences": {s: got[s]["train/loss"] - want[s]["train/loss"] for s in steps},
        "weights_max_abs_difference": max(float((a[k] - b[k]).detach().abs().max()) for k in a),
        "tensors_differing": [k for k in a if not torch.equal(a[k], b[k])]})
    assert [got[s]["train/loss"] for s in steps] == [want[s]["train/loss"] for s in steps]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_export_of_a_gpu_run_gives_the_training_logits_on_the_gpu(straight, tmp_path, corpus):
    """The export, on the device in the engine's dtype (bf16), against the trainer's own engine module on the
    same ids: the same weights (fp32 masters rounded once) and the same kernels, so the same bits."""
    from transformers import AutoModelForMaskedLM

    from xpt_ds.cli.export import main as export_main
    out = tmp_path / "exported"
    assert export_main(["--run", str(straight / "run"), "--out", str(out)]) == 0
    device = torch.device(ACCELERATOR if not ON_CPU else "cpu")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 200, (2, 24), generator=g)
    ids[:, 0], ids[:, -1] = 0, 2
    logits_path = tmp_path / "trainer_logits.pt"
    torch.save(ids, str(logits_path) + ".ids.pt")
    cmd = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "1", "--master_port", str(free_port()),
           str(REPO / "tests/trainer_logits.py"), str(straight / "cfg.yaml"), str(logits_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=gpu_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trained = torch.load(logits_path)

    model = AutoModelForMaskedLM.from_pretrained(out).to(device=device, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        exported = model(input_ids=ids.to(device)).logits.float().cpu()
        fp32 = AutoModelForMaskedLM.from_pretrained(out).to(device).eval()(input_ids=ids.to(device)).logits.cpu()
    report("export_logits", {"max_abs_difference": float((exported - trained).abs().max()),
                             "bf16_vs_fp32_max_abs": float((exported - fp32).abs().max())})
    assert torch.equal(exported, trained)
    assert torch.allclose(exported, fp32, atol=0.1, rtol=0.05)  # bf16 rounding, not another model


def test_trelm_and_a_non_random_embedding_start_run_a_phase(tmp_path, tiny_roberta, corpus, corpus_bert,
                                                             source_dir):  # noqa: F811
    cfg = gpu_config(tmp_path / "mean", tiny_roberta, corpus, "zero2_bf16",
                     model={"source": str(tiny_roberta), "tokenizer": str(corpus / "spm.model"), "method": "xpt",
                            "embedding_init": "source_mean"})
    cfg["phases"] = cfg["phases"][:1]
    train(tmp_path / "mean", cfg)
    got = losses(tmp_path / "mean/run")
    assert len(got) == STEPS and all(torch.isfinite(torch.tensor(got)))
    init = json.loads((tmp_path / "mean/run/embedding_init.json").read_text())
    assert init["strategy"] == "source_mean"

    parallel, _ = write_parallel(tmp_path / "parallel", corpus_bert)
    cfg = gpu_config(tmp_path / "trelm", source_dir, corpus_bert, "zero2_bf16",
                     model={"source": str(source_dir), "tokenizer": str(corpus_bert / "spm.model"),
                            "method": "trelm"})
    cfg["phases"] = cfg["phases"][:1]
    cfg["data"]["parallel_shards"] = [f"{parallel}:train"]
    train(tmp_path / "trelm", cfg)
    rows = read_metrics(tmp_path / "trelm/run")
    report("trelm", {"rows": rows})
    assert len(losses(tmp_path / "trelm/run")) == STEPS
    assert all(torch.isfinite(torch.tensor(r["train/loss"])) for r in rows.values() if "train/loss" in r)


def test_worker_processes_with_pinned_batches_train_the_same_bits(straight, tmp_path):
    """The straight run (0 workers) with 2 DataLoader workers per stream, forked before the engine, restarted in
    place for every validation pass (after each step here) and pinned for the asynchronous copy to the GPU
    (``xpt_ds.data.workers``): the same losses, validation losses and final weights, bit for bit."""
    cfg = yaml.safe_load((straight / "cfg.yaml").read_text())
    cfg["run_dir"] = str(tmp_path / "run")
    cfg["data"]["num_workers"] = 2
    cfg["logging"]["eval_every"] = 1
    train(tmp_path, cfg)
    want, got = read_metrics(straight / "run"), read_metrics(tmp_path / "run")
    valid = {s: r["valid/loss"] for s, r in want.items() if "valid/loss" in r}
    report("workers", {"losses": losses(tmp_path / "run"), "valid_steps": sorted(valid)})
    assert losses(tmp_path / "run") == losses(straight / "run")
    assert valid and all(got[s]["valid/loss"] == v for s, v in valid.items())
    assert sum("valid/loss" in r for r in got.values()) == 2 * STEPS  # a pass after every step
    a = load_checkpoint_fp32(straight / "run/checkpoints", tag_for(2 * STEPS))
    b = load_checkpoint_fp32(tmp_path / "run/checkpoints", tag_for(2 * STEPS))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.skipif(ON_CPU, reason="torch.compile is measured on the GPU; on the CPU it takes minutes per run")
def test_compile_trains_like_eager(straight, tmp_path, tiny_roberta, corpus):
    """``compile: true`` compiles the layers and the head in place: same parameter names and checkpoints, and the
    same training up to kernel rounding and the compiled dropout's own random stream."""
    cfg = yaml.safe_load((straight / "cfg.yaml").read_text())
    cfg.update(run_dir=str(tmp_path / "run"), compile=True)
    cfg["checkpoint"] = {"every_steps": 0}
    train(tmp_path, cfg, compile=True)
    eager, compiled = losses(straight / "run"), losses(tmp_path / "run")
    report("compile", {"eager": eager, "compiled": compiled})
    assert len(compiled) == 2 * STEPS and all(torch.isfinite(torch.tensor(compiled)))
    assert abs(compiled[0] - eager[0]) < 0.05 * eager[0]
    assert sum(compiled[-2:]) < sum(compiled[:2])
    a = load_checkpoint_fp32(straight / "run/checkpoints", tag_for(2 * STEPS))
    b = load_checkpoint_fp32(tmp_path / "run/checkpoints", tag_for(2 * STEPS))
    assert a.keys() == b.keys()


def test_recomputed_layers_train_the_same_bits(straight, tmp_path):
    """``activations.checkpoint_every: 1`` on the straight run (ZeRO-2, bf16, FusedAdam, dropout): the recomputed
    forward restores the CUDA generator, so every loss and the last weights are the same bits
    (tests/training/test_activations.py checks this on the CPU)."""
    cfg = yaml.safe_load((straight / "cfg.yaml").read_text())
    cfg.update(run_dir=str(tmp_path / "run"), activations={"checkpoint_every": 1})
    cfg["checkpoint"] = {"every_steps": 0}
    proc = train(tmp_path, cfg)
    assert "activation checkpointing: 4 of 4 layers recompute in the backward" in proc.stderr
    want, got = losses(straight / "run"), losses(tmp_path / "run")
    a = load_checkpoint_fp32(straight / "run/checkpoints", tag_for(2 * STEPS))
    b = load_checkpoint_fp32(tmp_path / "run/checkpoints", tag_for(2 * STEPS))
    report("recompute", {"loss_differences": [g - w for g, w in zip(got, want)],
                         "tensors_differing": [k for k in a if not torch.equal(a[k], b[k])]})
    assert got == want
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_fine_tuning_classification_on_the_gpu(straight, tmp_path, corpus_text):
    from finetune_builders import FAST, Words, flags, key_word_rows, split_files

    from xpt_ds.cli.export import main as export_main
    model = tmp_path / "model"
    assert export_main(["--run", str(straight / "run"), "--out", str(model)]) == 0
    files = split_files(key_word_rows(Words(corpus_text, model), 400), tmp_path / "data")
    args = [sys.executable, "-m", "xpt_ds.cli.finetune", "--model", str(model), "--out", str(tmp_path / "out"),
            "--seeds", "1", "--device", ACCELERATOR, *flags({**files, **FAST, "epochs": 5})]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600, env=gpu_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "out/results.json").read_text())
    report("finetune", {"summary": res["summary"], "majority": res["majority_baseline"]})
    assert res["seeds"][0]["test"]["accuracy"] > res["majority_baseline"]["accuracy"] + 0.15
