"""Decoder sources on one GPU (docs/decoders.md): GPT-2 (tied head, dropout on) under ZeRO-2 and Llama (untied)
under ZeRO-3, both bf16 with DeepSpeed's FusedAdam. Each runs XPT's two phases, checks phase 1's freezing and
optimizer state at the boundary (tests/training/test_decoder_train.py's ``_check_phase1``, which loads to the CPU),
resumes from the boundary with the same losses and weights bit for bit, and exports a stock *ForCausalLM whose
bf16 logits on the GPU are the training engine's own. ``pytest -m gpu tests/gpu``; skipped without CUDA,
``XPT_GPU_TESTS_ON_CPU=1`` rehearses on the CPU (there with torch AdamW: DeepSpeed's CPU FusedAdam is not
bitwise across a resume)."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch
from conftest import REPO, free_port, read_metrics
from gpu_builders import (
    ACCELERATOR,
    ON_CPU,
    STEPS,
    gpu_env,
    gpu_config,
    losses,
    report,
    train,
)
from decoder_builders import CLASSES, check_phase1, probe_ids, reused_of

from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.cli.export import main as export_main

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not (ON_CPU or torch.cuda.is_available()),
                                                  reason="needs CUDA (XPT_GPU_TESTS_ON_CPU=1 rehearses on CPU)")]
MATRIX = [("gpt2", True, "zero2_bf16"), ("llama", False, "zero3_bf16")]


def engine_logits(cfg_path, tmp_path) -> torch.Tensor:
    """The trainer's engine, loaded from the run's newest checkpoint on the device: its logits on ``probe_ids()``."""
    out = tmp_path / "engine_logits.pt"
    torch.save(probe_ids(), str(out) + ".ids.pt")
    cmd = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "1", "--master_port", str(free_port()),
           str(REPO / "tests/trainer_logits.py"), str(cfg_path), str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=gpu_env(), capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


@pytest.mark.parametrize("family,tied,ds", MATRIX, ids=[f"{f}-{ds}" for f, _, ds in MATRIX])
def test_decoder_two_phases_resume_and_export_on_the_gpu(family, tied, ds, tmp_path, tiny_decoder, corpus):
    from transformers import AutoModelForCausalLM
    source = tiny_decoder(family, tied, 0.1 if family == "gpt2" else 0.0)
    cfg = gpu_config(tmp_path / "straight", source, corpus, ds, checkpoint={"every_steps": STEPS})
    cfg["optim"]["torch_adam"] = ON_CPU
    train(tmp_path / "straight", cfg)
    straight = tmp_path / "straight/run"
    got = losses(straight)
    report(f"decoder_{family}_{ds}", {"losses": got})
    assert len(got) == 2 * STEPS and all(torch.isfinite(torch.tensor(got)))
    assert sum(got[-2:]) < sum(got[:2]), got

    stage = int(ds[4])
    check_phase1(straight / "checkpoints" / tag_for(STEPS), source, family, stage, world=1)
    reused, src = reused_of(source, family)
    final = load_checkpoint_fp32(straight / "checkpoints", tag_for(2 * STEPS))
    layers = [(t, s) for t, s in reused.items() if ".h." in t or ".layers." in t]
    assert layers and not any(torch.equal(final[t], src[s]) for t, s in layers)  # phase 2 trains them

    # Resume at the phase boundary: the same phase-2 losses and final weights, bit for bit.
    resumed = tmp_path / "resumed/run"
    shutil.copytree(straight / "checkpoints" / tag_for(STEPS), resumed / "checkpoints" / tag_for(STEPS))
    proc = train(tmp_path / "resumed", {**cfg, "run_dir": str(resumed)})
    assert f"resumed from {tag_for(STEPS)}" in proc.stderr
    want, again = read_metrics(straight), read_metrics(resumed)
    steps = list(range(STEPS + 1, 2 * STEPS + 1))
    other = load_checkpoint_fp32(resumed / "checkpoints", tag_for(2 * STEPS))
    report(f"decoder_resume_{family}_{ds}", {
        "loss_differences": {s: again[s]["train/loss"] - want[s]["train/loss"] for s in steps},
        "tensors_differing": [k for k in final if not torch.equal(final[k], other[k])]})
    assert [again[s]["train/loss"] for s in steps] == [want[s]["train/loss"] for s in steps]
    assert final.keys() == other.keys() and all(torch.equal(final[k], other[k]) for k in final)

    # The export, on the device in bf16, against the engine's module on the same ids.
    out = tmp_path / "exported"
    assert export_main(["--run", str(resumed), "--out", str(out)]) == 0
    trained = engine_logits(tmp_path / "resumed/cfg.yaml", tmp_path)
    device = torch.device(ACCELERATOR)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).to(device).eval()
    assert type(model) is CLASSES[family]
    with torch.no_grad():
        exported = model(input_ids=probe_ids().to(device)).logits.float().cpu()
    report(f"decoder_export_{family}_{ds}", {"max_abs_difference": float((exported - trained).abs().max())})
    assert torch.equal(exported, trained)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_fine_tuning_a_decoder_on_the_gpu(lora_rank, xpt_decoder_model, tmp_path, corpus_text):
    """``xpt-ds finetune`` of a Llama-layout export on the device: fp32 weights under bf16 autocast, every layer
    recomputed in the backward, and with LoRA the updates and the head alone (tests/finetuning/
    test_finetune_decoder.py has the CPU checks). It learns the key-word task."""
    import json

    from finetune_builders import FAST, Words, flags, key_word_rows, split_files
    files = split_files(key_word_rows(Words(corpus_text, xpt_decoder_model), 400), tmp_path / "data")
    args = [sys.executable, "-m", "xpt_ds.cli.finetune", "--model", str(xpt_decoder_model), "--out",
            str(tmp_path / "out"), "--seeds", "1", "--device", ACCELERATOR, "--activation-checkpointing",
            "--lora-rank", str(lora_rank), *flags({**files, **FAST, "epochs": 5})]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600, env=gpu_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "activation checkpointing: 4 of 4 layers recompute in the backward" in proc.stderr
    res = json.loads((tmp_path / "out/results.json").read_text())
    seed = res["seeds"][0]
    report(f"finetune_decoder_lora{lora_rank}", {"test": seed["test"], "trainable": seed["trainable"],
                                                 "majority": res["majority_baseline"], "device": res["device"]})
    assert res["device"] == ACCELERATOR and res["arithmetic"] == ("fp32" if ON_CPU else "bf16 autocast")
    # on CUDA, LoRA's frozen bases are stored in bf16 (tests/finetuning/test_finetune_precision.py on the CPU)
    assert ("stored in bf16" in proc.stderr) == (bool(lora_rank) and not ON_CPU)
    assert (seed["trainable"] < 20_000) == bool(lora_rank)  # LoRA's 4 layers and head, or the whole model
    assert seed["test"]["accuracy"] > res["majority_baseline"]["accuracy"] + 0.15, seed


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_lora_bases_in_bf16_give_the_bits_of_fp32_ones_on_the_gpu(family, tiny_decoder):
    """Under the device's bf16 autocast, LoRA's frozen bases stored in bf16 (``--precision auto`` on CUDA) give
    the logits and gradients that fp32 bases give, bit for bit, in less memory."""
    import copy

    from finetune_builders import lora_classifier, lora_step
    from xpt_ds.finetuning.precision import frozen_bases_in_bf16
    fp32 = lora_classifier(tiny_decoder(family, family == "gpt2", 0.0), family)
    bf16 = copy.deepcopy(fp32)
    frozen_bases_in_bf16(bf16)
    g = torch.Generator().manual_seed(1)
    ids, labels = torch.randint(3, 120, (4, 12), generator=g), torch.tensor([0, 1, 2, 1])
    runs = {}
    for name, model in (("fp32", fp32), ("bf16", bf16)):
        model.to(ACCELERATOR)
        if not ON_CPU:
            torch.cuda.reset_peak_memory_stats()
        runs[name] = lora_step(model, ids.to(ACCELERATOR), labels.to(ACCELERATOR))
        if not ON_CPU:
            runs[name] += (torch.cuda.max_memory_allocated(),)
        model.cpu()
    (want, want_grads, *want_peak), (got, got_grads, *got_peak) = runs["fp32"], runs["bf16"]
    report(f"finetune_lora_bf16_bases_{family}", {"peak_bytes": {"fp32": want_peak, "bf16": got_peak}})
    assert torch.equal(got, want)
    assert all(torch.equal(got_grads[n], want_grads[n]) for n in want_grads)
    assert got_peak <= want_peak
