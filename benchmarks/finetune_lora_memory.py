"""What LoRA fine-tuning of a decoder holds in memory while it trains, by ``--precision``: the model of ``--model``
as ``xpt-ds finetune --lora-rank R`` builds it (fp32, LoRA on every linear map of its layers, a new sequence head),
then ``--steps`` AdamW steps on random rows, each variant in a fresh process.

- ``fp32``: no autocast (``--precision fp32``, and ``auto`` on the CPU);
- ``autocast_fp32_bases``: bf16 autocast over fp32 frozen weights (what ``xpt-ds finetune`` ran on CUDA before
  2026-12-01);
- ``autocast_bf16_bases``: bf16 autocast with the frozen base weights stored in bf16 (``--precision bf16`` now,
  and ``auto`` on CUDA);
- ``hf_trainer_peft``: the peer, as its documentation runs LoRA sequence classification:
  ``AutoModelForSequenceClassification.from_pretrained`` (transformers 5 keeps the file's dtype, bf16 for a hub
  decoder), ``peft.get_peft_model`` with ``task_type="SEQ_CLS"`` and the same rank, alpha and target maps, and
  ``Trainer`` with ``bf16=True``, the same rows, batch and AdamW lr, for the same number of steps.

On the CPU it reports the process's resident memory (``VmRSS``, the mapped model file's pages included: the peer
keeps its bf16 weights as the file maps them) after the build and its peak during the steps (``VmHWM``, reset after
the build); on CUDA, ``torch.cuda`` memory after the build and its peak. Run:
``python benchmarks/finetune_lora_memory.py --model DIR [--device cuda] [--rows 8 --length 256 --steps 3]``
(DIR: a decoder with its config, e.g. ``bench_build.write_source(out, "1b")``)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
VARIANTS = ("fp32", "autocast_fp32_bases", "autocast_bf16_bases", "hf_trainer_peft")


def inputs(vocab_size: int, rows: int, length: int):
    """The same random rows and labels for every variant (no id of a large vocabulary's last 1,000: its specials)."""
    import torch
    g = torch.Generator().manual_seed(1)
    high = vocab_size - 1000 if vocab_size > 10_000 else vocab_size
    return torch.randint(0, high, (rows, length), generator=g), torch.randint(0, 2, (rows,), generator=g)


def start_window(device: str) -> int:
    """Memory now (after the build), and the peak counter reset so that ``window_peak`` reads the steps' alone: on
    the CPU, Linux's ``clear_refs`` 5 resets ``VmHWM`` (``xpt_ds.metrics.memory.host_rss`` reads both)."""
    import torch

    from xpt_ds.metrics.memory import host_rss
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError as e:
        raise SystemExit(f"cannot reset the peak resident set through /proc/self/clear_refs: {e}") from None
    return host_rss()[0]


def window_peak(device: str) -> int:
    import torch

    from xpt_ds.metrics.memory import host_rss
    return torch.cuda.max_memory_allocated() if device == "cuda" else host_rss()[1]


def measure(model_dir: str, variant: str, device: str, rank: int, rows: int, length: int, steps: int) -> dict:
    if variant == "hf_trainer_peft":
        return measure_peer(model_dir, device, rank, rows, length, steps)
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from xpt_ds.finetuning.lora import with_lora
    from xpt_ds.finetuning.precision import frozen_bases_in_bf16
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2, dtype=torch.float32,
                                                               pad_token_id=config.eos_token_id)
    with_lora(model, rank, 16.0, config.model_type)
    if variant == "autocast_bf16_bases":
        frozen_bases_in_bf16(model)
    model.to(device).train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids, labels = (t.to(device) for t in inputs(config.vocab_size, rows, length))
    built = start_window(device)
    losses, seconds = [], []
    for _ in range(steps):
        started = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=variant != "fp32"):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        seconds.append(time.perf_counter() - started)
    return report(variant, device, model, built, window_peak(device), seconds, losses)


def report(variant: str, device: str, model, built: int, top: int, seconds: list, losses: list) -> dict:
    return {"variant": variant, "device": device,
            "memory": "torch.cuda allocated" if device == "cuda" else "VmRSS; peak VmHWM",
            "after_build_gb": round(built / 1e9, 2), "peak_in_steps_gb": round(top / 1e9, 2),
            "step_s": [round(s, 2) for s in seconds], "losses": losses,
            "parameters": sum(p.numel() for p in model.parameters()),
            "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}


def measure_peer(model_dir: str, device: str, rank: int, rows: int, length: int, steps: int) -> dict:
    import tempfile

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForSequenceClassification, Trainer, TrainerCallback, \
        TrainingArguments

    from xpt_ds.model.methods.lora import targets_of
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2,
                                                               pad_token_id=config.eos_token_id)
    model = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=rank, lora_alpha=16.0, lora_dropout=0.0,
                                             target_modules=list(targets_of(config.model_type))))
    ids, labels = inputs(config.vocab_size, rows, length)
    data = [{"input_ids": i, "labels": y} for i, y in zip(ids, labels)]
    seconds, losses = [], []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.started = time.perf_counter()

        def on_step_end(self, *a, **k):
            seconds.append(time.perf_counter() - self.started)

        def on_log(self, args, state, control, logs=None, **k):
            if logs and "loss" in logs:
                losses.append(logs["loss"])

    with tempfile.TemporaryDirectory() as scratch:  # the Trainer's output_dir; it saves nothing here
        args = TrainingArguments(output_dir=scratch, per_device_train_batch_size=rows, max_steps=steps,
                                 learning_rate=1e-4, lr_scheduler_type="constant", weight_decay=0.0, bf16=True,
                                 use_cpu=device == "cpu", logging_steps=1, save_strategy="no", report_to=[],
                                 dataloader_num_workers=0, disable_tqdm=True, max_grad_norm=0.0)
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[Clock()],
                          data_collator=lambda rows_: {"input_ids": torch.stack([r["input_ids"] for r in rows_]),
                                                       "labels": torch.stack([r["labels"] for r in rows_])})
        model.to(device)
        built = start_window(device)
        trainer.train()
    return report("hf_trainer_peft", device, model, built, window_peak(device), seconds, losses)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child process: this variant alone, as JSON
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.model, a.one, a.device, a.rank, a.rows, a.length, a.steps)))
        return
    for variant in a.variants.split(","):
        proc = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--one", variant], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            print(json.dumps({"variant": variant, "error": proc.stderr.strip().splitlines()[-1:]}))
            continue
        print(proc.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
