"""Training throughput: this trainer vs. Hugging Face ``Trainer`` + DeepSpeed, same model, batch and device.

The model is the 14-layer XPT target of a RoBERTa-base-shaped source (hidden 768, 12 heads, FFN 3072,
12 source layers + 2 ITLs, 50,000-piece target vocabulary), built from configs (no downloads). For each
sequence length and phase, each side trains ``--warmup`` + ``--steps`` optimizer steps in its own process
(a world of one), and the timed window runs from the start of the first step after warm-up to the end of the
last step, with a device synchronisation at both ends:

- xpt: ``xpt_ds.model.build.build_model`` -> ``MaskedLMObjective`` -> ``xpt_ds.training.engine.build_engine`` with
  ``ds_configs/zero2_bf16.json`` and the phase's trainable set from ``xpt_ds.model.phases`` (phase 1: ``@new``,
  phase 2: ``@all``); each step is ``Trainer.train_step``'s body (set_lr, forward, backward, step). The LM
  head runs on the masked positions only. As in a rank of ``xpt_ds.cli.train``, the imports are frozen for the
  garbage collector and the build runs without its passes (``xpt_ds.runtime.collector``).
- hf: the same stock ``RobertaForMaskedLM`` (same weights, same frozen set) under ``transformers.Trainer``
  with ``TrainingArguments(deepspeed=<the same JSON plus the "auto" batch/optimizer keys>)``; labels are -100
  except on masked positions, so the head computes full-vocabulary logits on every position, as stock HF does.

Both sides get the same synthetic packed batches (cls + random ids + sep, no padding, no attention mask,
masked by ``xpt_ds.data.mlm.MLMMasker``) already in host memory, moved to the device each step: data loading is
not measured here (``benchmarks/bench_loader.py`` does); what remains in the window is HF's default
in-process DataLoader stacking the pre-made samples, and a list lookup on the xpt side (whose real loader runs
in worker processes). MFU counts the same model FLOPs per token for
both sides (``xpt_ds.metrics.logger.flops_per_token``: the decoder on the 15 % masked positions only); the HF row's
``mfu_full_head`` also counts its full-vocabulary decoder. Peak memory is ``torch.cuda.max_memory_allocated``
on GPU and the process's peak RSS on CPU. On CPU (``DS_ACCELERATOR=cpu``) MFU is null; ``--tiny`` keeps the
script working in CI, and a full-size CPU run (BENCHMARKS.md) measures CPU speed only.

``--decoder 1b|135m`` measures a decoder instead (``benchmarks/throughput_decoder.py``: the XPT target of a
Llama-layout source on packed rows of several documents, HF Trainer on plain causal rows and, with ``--hf-variants
docpos``, on per-document positions; ``--variants flex`` for FlexAttention), with the engine JSON ``--engine``.

    python benchmarks/bench_throughput.py [--tiny] [--decoder SHAPE] [--engine STEM] [--seq-lens 128 512]
        [--phases 1 2] [--tokens-per-batch 16384] [--micro-batch N] [--steps 100] [--warmup 10] [--sides hf xpt]
        [--variants compile ...] [--profile DIR] [--max-batch N ...] [--out results.json]

prints a markdown table for BENCHMARKS.md and writes every figure to ``--out``, with what each row's engine really
ran (``engine``: ZeRO stage, dtypes, autocast, clipping, the ZeRO optimizer's settings; ``ds_config``: the engine
JSON it was given) and what else ran as it started (``busy``: host load, other GPU processes; the table names
rows started beside other work). ``--variants`` adds an xpt_ds row per optimisation tried
(throughput_variants.VARIANTS: compile, engine settings, activation checkpointing), ``--hf-variants`` an HF row
on an engine setting or with activation checkpointing,
``--profile`` a torch.profiler table per xpt_ds row, and ``--max-batch`` replaces the timing by the search for the
largest micro-batch that fits. ``benchmarks/gpu_session.sh`` installs
the missing packages on a bare GPU machine and runs all of this at full size.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# benchmarks/: this script's own folder is on sys.path
from throughput_facts import LinearOutputDtype, engine_facts, frozen_matmul, optimizer_state_gib
from throughput_profile import profile_steps, synchronize
from throughput_decoder import (
    DECODER_SHAPES,
    HF_ONLY,
    decoder_batches,
    decoder_tokenizer,
    documents_per_row,
    hf_samples,
    write_decoder_source,
)
from throughput_report import machine, render
from throughput_variants import DECODER_ONLY, HF_VARIANTS, VARIANTS, engine_json
from xpt_ds import config
from xpt_ds.runtime.ports import free_port

REPO = Path(__file__).resolve().parents[1]
# RoBERTa-base shape (a source vocabulary of 50,265 as the real one; only its encoder and head are reused).
FULL = dict(source_vocab=50265, target_vocab=50000, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072)
TINY = dict(source_vocab=100, target_vocab=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=128)
SIDES = ("hf", "xpt")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="2 layers, hidden 64, vocab 1000 (CPU smoke run)")
    p.add_argument("--decoder", choices=sorted(DECODER_SHAPES),
                   help="the XPT target of a Llama-layout source of this shape on packed next-token rows "
                        "(benchmarks/throughput_decoder.py) instead of the RoBERTa-base-shaped encoder")
    p.add_argument("--sources", metavar="DIR", help="keep the written decoder source in DIR/decoder-SHAPE and reuse it "
                                                    "from there (default: a temporary folder per run)")
    p.add_argument("--engine", metavar="STEM", help="ds_configs/STEM.json for every row whose variant names no "
                                                     "engine JSON of its own (default: zero2_<precision>)")
    p.add_argument("--seq-lens", type=int, nargs="+", default=None, help="default 128 512 (tiny: 32 64)")
    p.add_argument("--phases", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    p.add_argument("--tokens-per-batch", type=int, help="micro batch = this // seq len; default 16384 (tiny: 256)")
    p.add_argument("--micro-batch", type=int, help="sequences per step at every length (overrides the above)")
    p.add_argument("--steps", type=int, default=100, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (allocator, kernels, JIT)")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                   help="ds_configs/zero2_<precision>.json on both sides")
    p.add_argument("--optimizer", choices=["fused", "torch"],
                   help="DeepSpeed FusedAdam, or torch AdamW (foreach=False, as optim.torch_adam) on both sides; "
                        "default: fused on CUDA, torch on CPU")
    p.add_argument("--peak-tflops", type=float, default=0.0, 
                   help="device peak for MFU; 0 = xpt_ds.config.H100_PEAK_TFLOPS on CUDA")
    p.add_argument("--out", default="bench_throughput.json")
    p.add_argument("--worker-timeout", type=int, default=300, help="seconds before one side's run counts as failed")
    p.add_argument("--sides", nargs="*", choices=SIDES, default=list(SIDES),
                   help="which trainers' plain rows to run (none: only --variants)")
    p.add_argument("--variants", nargs="*", default=[], choices=sorted(VARIANTS),
                   help="extra xpt_ds rows, one per optimisation tried (VARIANTS), beside the plain rows")
    p.add_argument("--hf-variants", nargs="*", default=[], choices=HF_VARIANTS + sorted(HF_ONLY),
                   help="extra HF rows with an engine-JSON variant, so xpt_ds's row with the same variant has a "
                        "peer on the same DeepSpeed settings ('vs HF' then also gives that ratio)")
    p.add_argument("--profile", metavar="DIR", help="also profile 3 steps of each xpt_ds row with torch.profiler: "
                                                    "DIR/profile-<row>.txt (top operators and kernels by device "
                                                    "time) and the attention kernels that ran in the row")
    p.add_argument("--max-batch", type=int, nargs="+", metavar="N",
                   help="instead of timing: for each side and phase, try these micro-batch sizes in ascending "
                        "order (2 steps each) and report the largest that fits in device memory")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one side from this JSON spec
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.worker:
        spec = json.loads(Path(a.worker).read_text())
        result = (run_xpt if spec["side"] == "xpt" else run_hf)(spec)
        Path(spec["result"]).write_text(json.dumps(result))
        return 0
    cuda = _on_cuda()
    size = TINY if a.tiny else FULL
    seq_lens = a.seq_lens or ([32, 64] if a.tiny else [128, 512])
    if not a.decoder and (set(a.variants) & set(DECODER_ONLY) or set(a.hf_variants) & set(HF_ONLY)):
        raise SystemExit("bench_throughput: --variants flex and --hf-variants docpos are decoder rows (--decoder)")
    optimizer = a.optimizer or ("fused" if cuda else "torch")
    rows, failed = [], False
    # What a report says about its run, written with the first row: a session stopped mid-table keeps it.
    head = {"machine": machine(cuda), "args": {k: v for k, v in vars(a).items() if k != "worker"},
            "seq_lens": seq_lens, "optimizer": optimizer,
            "peak_tflops": None if not cuda else a.peak_tflops or config.H100_PEAK_TFLOPS}
    with tempfile.TemporaryDirectory() as tmp:
        runs = ([(side, "") for side in a.sides] + [("xpt", v) for v in a.variants]
                + [("hf", v) for v in a.hf_variants])
        for seq_len in seq_lens:
            micro_batch = a.micro_batch or max(1, (a.tokens_per_batch or (256 if a.tiny else 16384)) // seq_len)
            for phase in a.phases:
                for side, variant in runs:
                    name = f"{side}{'-' + variant if variant else ''}-{seq_len}-{phase}"
                    spec = dict(side=side, variant=variant, phase=phase, seq_len=seq_len, micro_batch=micro_batch,
                                decoder=a.decoder, **({"ds_file": a.engine} if a.engine else {}),
                                steps=a.steps, warmup=a.warmup, precision=a.precision, optimizer=optimizer,
                                source=f"{a.sources}/decoder-{a.decoder}" if a.decoder and a.sources
                                else f"{tmp}/source", size=size, max_len=max(seq_lens), peak_tflops=a.peak_tflops,
                                tmp=tmp, result=f"{tmp}/{name}.json", max_batch=a.max_batch,
                                profile=f"{a.profile}/profile-{name}.txt" if a.profile and side == "xpt" else None,
                                **VARIANTS.get(variant, HF_ONLY.get(variant, {})))
                    rows.append(run_worker(spec, Path(tmp), a.worker_timeout))
                    failed |= "error" in rows[-1]
                    Path(a.out).write_text(json.dumps({**head, "partial": True, "results": rows}, indent=1))
    report = {**head, "results": rows}
    table = render(report)  # and the ratios into the rows, which the report keeps
    Path(a.out).write_text(json.dumps(report, indent=1))
    print(table)
    return 1 if failed else 0


def save_source(out: Path, size: dict, max_len: int) -> None:
    """A random RoBERTa-base-shaped English source: build_model copies its encoder and head like a real one.
    Written by a run's first worker, not the parent, which then never imports transformers (seconds per run)."""
    import torch
    from transformers import RobertaConfig, RobertaForMaskedLM

    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=size["source_vocab"], hidden_size=size["hidden_size"],
                           num_hidden_layers=size["num_hidden_layers"], num_attention_heads=size["num_attention_heads"],
                           intermediate_size=size["intermediate_size"], max_position_embeddings=max(514, max_len + 2),
                           type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)
    part = out.with_name(out.name + ".part")  # renamed when complete: a worker killed mid-write leaves no source
    RobertaForMaskedLM(config).save_pretrained(part)
    part.rename(out)


def run_worker(spec: dict, tmp: Path, timeout: int) -> dict:
    """One side in a fresh process, a world of one on a free port; a failure becomes the row's ``error``."""
    spec_path = tmp / f"spec-{Path(spec['result']).stem}.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(spec_path)]
    busy = machine_busy()
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "TOKENIZERS_PARALLELISM": "false"}
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc = subprocess.CompletedProcess(cmd, "timeout", "", f"timed out after {timeout} s")
    row = {k: spec[k] for k in ("side", "variant", "phase", "seq_len", "micro_batch")}
    row["busy"] = busy
    if proc.returncode != 0 or not Path(spec["result"]).is_file():
        row["error"] = f"exit {proc.returncode}: {proc.stderr[-3000:]}"
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    else:
        row.update(json.loads(Path(spec["result"]).read_text()))
        last = (f"largest micro-batch {row['largest_fit']}" if spec.get("max_batch")
                else f"{row['tokens_per_s']:,.0f} tokens/s")
    print(f"{spec['side']}{' ' + spec['variant'] if spec['variant'] else ''} seq_len {spec['seq_len']} "
          f"phase {spec['phase']}: {last}", file=sys.stderr, flush=True)
    return row


def machine_busy() -> dict:
    """What else used the machine as a row started: the host's 1-minute load average and the compute processes
    nvidia-smi lists on the GPU (None where there is no nvidia-smi). A row timed beside another job (a test
    worker left running, say) is no figure to compare; the report names such rows."""
    busy = {"load_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(), "gpu_processes": None}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return busy
    if smi.returncode == 0:
        busy["gpu_processes"] = [line.strip() for line in smi.stdout.splitlines() if line.strip()]
    return busy


def build_side_model(spec: dict):
    """The XPT target model, its run config and the HF names that train in ``spec['phase']`` (both sides)."""
    from xpt_ds.config import (ActivationsConfig, DataConfig, LoggingConfig, ModelConfig, OptimConfig, PhaseConfig,
                               TrainConfig)
    from xpt_ds.data.tokenizer import TargetTokenizer
    from xpt_ds.model.build import build_model
    from xpt_ds.model.phases import build_phase_trainables

    if spec.get("decoder"):
        write_decoder_source(Path(spec["source"]), spec["decoder"])
    elif not Path(spec["source"]).is_dir():  # workers run one at a time
        save_source(Path(spec["source"]), spec["size"], spec["max_len"])
    steps = spec["warmup"] + spec["steps"]
    ds_path = Path(spec["result"]).with_suffix(".ds.json")
    ds_path.write_text(json.dumps(engine_json(spec)))
    phases = [PhaseConfig(name="phase1", steps=steps, lr=1e-4, warmup_steps=spec["warmup"]),
              PhaseConfig(name="phase2", steps=steps, lr=1e-4, warmup_steps=spec["warmup"])]
    optim = OptimConfig(micro_batch_size=spec["micro_batch"], torch_adam=spec["optimizer"] == "torch")
    if "grad_clip" in spec:  # a variant's (nosync)
        optim.grad_clip = spec["grad_clip"]
    cfg = TrainConfig(deepspeed=str(ds_path), compile=bool(spec.get("compile")),
                      model=ModelConfig(source=spec["source"], method="xpt", attention=spec.get("attention", "sdpa")),
                      phases=phases,
                      data=DataConfig(seq_len=spec["seq_len"]), optim=optim,
                      logging=LoggingConfig(peak_tflops=spec["peak_tflops"]),
                      activations=ActivationsConfig(checkpoint_every=spec.get("activations", 0)))
    # build_model needs only the special ids and the size of the target vocabulary (RoBERTa layout), so no
    # SentencePiece model is trained here; ``path`` is never read.
    pad = spec.get("pad_vocab") or 1
    tok = decoder_tokenizer(spec["decoder"]) if spec.get("decoder") else TargetTokenizer(
        path="", vocab_size=-(-spec["size"]["target_vocab"] // pad) * pad, pad_id=1, cls_id=0, sep_id=2, unk_id=3,
        mask_id=4)
    built = build_model(cfg.model, tok)
    trainable = build_phase_trainables(cfg, built.tags)[spec["phase"] - 1]
    return cfg, tok, built.model, trainable


def synthetic_batches(spec: dict, cfg, tok, n: int = 4, micro_batch: int | None = None) -> list[dict]:
    """``n`` packed, masked micro-batches in host memory: cls + random ids + sep, as the packer makes them; for a
    decoder, packed next-token rows of several documents (``throughput_decoder.decoder_batches``)."""
    import torch

    from xpt_ds.data.mlm import MLMMasker

    B, T = micro_batch or cfg.optim.micro_batch_size, cfg.data.seq_len
    if spec.get("decoder"):
        return decoder_batches(tok, B, T, n)
    g = torch.Generator().manual_seed(0)
    out = []
    for b in range(n):
        ids = torch.randint(max(tok.special_ids) + 1, tok.vocab_size, (B, T), generator=g)
        ids[:, 0], ids[:, -1] = tok.cls_id, tok.sep_id
        out.append(MLMMasker(cfg.data, tok)(ids, seeds=[b * B + j for j in range(B)]))
    return out


def run_xpt(spec: dict) -> dict:
    from xpt_ds.runtime import collector
    with collector.importing():  # as a rank of xpt_ds.cli.train starts: its imports frozen for the collector
        import deepspeed
        import torch

        from xpt_ds.checkpoint.frozen import FrozenWeights
        from xpt_ds.config.schedule import lr_at
        from xpt_ds.model.forward.objective import build_objective
        from xpt_ds.runtime.distributed import init_distributed
        from xpt_ds.training.engine import build_engine, set_lr
        from xpt_ds.training.fill import fill

    init_distributed()  # as a rank of xpt_ds.cli.train joins
    with collector.paused():
        cfg, tok, model, trainable = build_side_model(spec)
        objective = build_objective(model, attention=cfg.model.attention)  # MLM, or next-token for a decoder
        fp32 = {n: p.detach().clone() for n, p in objective.named_parameters()}
        engine, optimizer = build_engine(objective, {f"hf.{n}" for n in trainable}, cfg)
        fill(engine, fp32.__getitem__, {f"hf.{n}" for n in trainable}, FrozenWeights(), "bench model")
    probe = None if cfg.compile else LinearOutputDtype(model)  # a hook inside a compiled layer would break its graph
    device = torch.device(deepspeed.get_accelerator().current_device_name())
    phase = cfg.phases[spec["phase"] - 1]
    # Pinned host batches, as the trainer's loader hands them over on CUDA (xpt_ds.data.mlm).
    pin = (lambda b: {k: v.pin_memory() for k, v in b.items()}) if device.type == "cuda" else (lambda b: b)

    def step_(batch: dict, step: int) -> torch.Tensor:  # Trainer.train_step's body for one micro-batch
        set_lr(optimizer, lr_at(phase, step))
        loss = engine(**{k: v.to(device, non_blocking=True) for k, v in batch.items()})
        engine.backward(loss)
        engine.step()
        return loss.detach()

    if spec.get("max_batch"):
        result = _largest_fit(spec, lambda size: [step_(pin(b), s) for s, b in
                                                  enumerate(synthetic_batches(spec, cfg, tok, 2, micro_batch=size))])
        engine.destroy()
        deepspeed.comm.destroy_process_group()
        return result
    batches = [pin(b) for b in synthetic_batches(spec, cfg, tok)]
    total, t0 = torch.zeros((), device=device), 0.0  # as train_step: the loss is summed on the device, no sync
    for step in range(spec["warmup"] + spec["steps"]):
        if step == spec["warmup"]:
            t0 = _synchronized_clock()
        total += step_(batches[step % len(batches)], step)
    seconds = _synchronized_clock() - t0
    resident = torch.cuda.memory_allocated() / 2 ** 30 if device.type == "cuda" else None
    result = _measurements(spec, model.config, seconds, n_params=sum(v.numel() for v in fp32.values()),
                           n_trainable=sum(p.numel() for n, p in model.named_parameters() if n in trainable),
                           frozen_matmul=frozen_matmul(model, trainable), engine=engine_facts(engine),
                           ds_config=engine_json(spec), linear_out_dtype=probe and probe.dtype,
                           resident_gib=resident, optimizer_state_gib=optimizer_state_gib(engine),
                           final_loss=float(total.item() / (spec["warmup"] + spec["steps"])),
                           **({"documents_per_row": documents_per_row(batches)} if spec.get("decoder") else {}))
    if spec.get("profile"):
        result["profile"] = profile_steps(lambda i: step_(batches[i % len(batches)], i), spec["profile"], device)
    engine.destroy()
    deepspeed.comm.destroy_process_group()
    return result


def hf_deepspeed_config(spec: dict) -> dict:
    """The row's engine JSON (engine_json: the repo's, with an --hf-variants row's changes) plus what an HF +
    DeepSpeed user writes: batch, clipping and optimizer on "auto" (filled from TrainingArguments); the scheduler
    is the Trainer's own (linear, as lr_at)."""
    ds = engine_json(spec)
    params = {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}
    if spec["optimizer"] == "torch":  # the same torch.optim.AdamW(foreach=False) as optim.torch_adam
        params.update(torch_adam=True, foreach=False)
    ds.update(train_batch_size="auto", train_micro_batch_size_per_gpu="auto", gradient_accumulation_steps="auto",
              gradient_clipping="auto", optimizer={"type": "AdamW", "params": params}, steps_per_print=10 ** 9,
              wall_clock_breakdown=False)
    return ds


def run_hf(spec: dict) -> dict:
    if spec.get("max_batch"):
        return _largest_fit(spec, lambda size: _hf_train({**spec, "micro_batch": size, "warmup": 0, "steps": 2}))
    seconds, trainer, model, trainable = _hf_train(spec)
    return _measurements(spec, model.config, seconds, n_params=sum(p.numel() for p in model.parameters()),
                         n_trainable=sum(p.numel() for n, p in model.named_parameters() if n in trainable),
                         frozen_matmul=frozen_matmul(model, trainable), engine=engine_facts(trainer.model_wrapped),
                         ds_config=hf_deepspeed_config(spec),
                         optimizer_state_gib=optimizer_state_gib(trainer.model_wrapped))


def _hf_train(spec: dict):
    """Train ``spec``'s steps under ``transformers.Trainer``: (timed seconds, trainer, model, trainable names)."""
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    cfg, tok, model, trainable = build_side_model(spec)
    for n, p in model.named_parameters():
        p.requires_grad_(n in trainable)
    if spec.get("decoder"):  # next-token labels on every position; no KV cache in a training forward
        model.config.use_cache = False
        samples = hf_samples(synthetic_batches(spec, cfg, tok), spec.get("positions", "row"))
    else:
        samples = []
        for batch in synthetic_batches(spec, cfg, tok):
            labels = torch.full_like(batch["input_ids"], -100)
            labels.view(-1)[batch["mlm_positions"]] = batch["mlm_targets"]
            samples += [{"input_ids": i, "labels": y} for i, y in zip(batch["input_ids"], labels)]
    warmup, steps = spec["warmup"], spec["steps"]

    class Repeated(torch.utils.data.Dataset):
        """One epoch long enough for every step, so no epoch boundary falls inside the timed window."""

        def __len__(self):
            return (warmup + steps) * cfg.optim.micro_batch_size

        def __getitem__(self, i):
            return samples[i % len(samples)]

    class StepClock(TrainerCallback):
        t0 = seconds = None

        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == warmup:
                self.t0 = _synchronized_clock()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == warmup + steps:
                self.seconds = _synchronized_clock() - self.t0

    o, clock = cfg.optim, StepClock()
    args = TrainingArguments(
        output_dir=f"{spec['tmp']}/hf-{spec['seq_len']}-{spec['phase']}", max_steps=warmup + steps,
        per_device_train_batch_size=o.micro_batch_size, gradient_accumulation_steps=o.grad_accum,
        learning_rate=cfg.phases[0].lr, warmup_steps=warmup, lr_scheduler_type="linear",
        weight_decay=o.weight_decay, adam_beta1=o.betas[0], adam_beta2=o.betas[1], adam_epsilon=o.eps,
        max_grad_norm=o.grad_clip, bf16=spec["precision"] == "bf16", deepspeed=hf_deepspeed_config(spec),
        logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, seed=cfg.seed, use_cpu=not _on_cuda(),
        gradient_checkpointing=bool(spec.get("activations")), gradient_checkpointing_kwargs={"use_reentrant": False})
    trainer = Trainer(model=model, args=args, train_dataset=Repeated(), callbacks=[clock])
    trainer.train()
    return clock.seconds, trainer, model, trainable


def _largest_fit(spec: dict, run_size) -> dict:
    """Run ``run_size(n)`` for each of ``spec['max_batch']`` in ascending order until one runs out of device
    memory: the largest n that ran, and each try's peak memory."""
    import gc

    import torch

    cuda = _on_cuda()
    tried = []
    for size in sorted(spec["max_batch"]):
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        try:
            run_size(size)
            _synchronized_clock()
            tried.append({"micro_batch": size, "fits": True,
                          "peak_memory_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else None})
        except torch.OutOfMemoryError:
            tried.append({"micro_batch": size, "fits": False})
            break
        finally:
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    fits = [t["micro_batch"] for t in tried if t["fits"]]
    return {"tried": tried, "largest_fit": max(fits, default=0), "ran_out": not tried[-1]["fits"],
            "device_gib": torch.cuda.get_device_properties(0).total_memory / 2 ** 30 if cuda else None}


def _on_cuda() -> bool:
    if os.environ.get("DS_ACCELERATOR", "cuda") != "cuda":
        return False  # said without importing torch, seconds in the parent process on CPU
    import torch

    return torch.cuda.is_available()


def _synchronized_clock() -> float:
    synchronize()
    return time.perf_counter()


def _measurements(spec: dict, hf_config, seconds: float, **extra) -> dict:
    import torch

    from xpt_ds.metrics.logger import flops_per_token, peak_flops

    tokens_per_s = spec["steps"] * spec["micro_batch"] * spec["seq_len"] / seconds
    cuda = _on_cuda()
    peak = peak_flops(spec["peak_tflops"]) if cuda else None
    mask_prob = 1.0 if spec.get("decoder") else 0.15  # every next token; DataConfig.mask_prob, the masker's
    mfu = None if peak is None else flops_per_token(hf_config, spec["seq_len"], mask_prob) * tokens_per_s / peak
    # FLOPs the step really does: a frozen layer weight costs 4 per token (forward, input gradient), not 6.
    done = flops_per_token(hf_config, spec["seq_len"], mask_prob) - 2 * extra.get("frozen_matmul", 0)
    mfu_done = None if peak is None else done * tokens_per_s / peak
    full = None if peak is None else flops_per_token(hf_config, spec["seq_len"], 1.0) * tokens_per_s / peak
    if cuda:
        memory = {"peak_memory_gib": torch.cuda.max_memory_allocated() / 2 ** 30, "memory_kind": "cuda_allocated",
                  "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2 ** 30}
    else:  # ru_maxrss is in KiB on Linux
        memory = {"peak_memory_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20,
                  "memory_kind": "host_rss"}
    return {"tokens_per_s": tokens_per_s, "step_ms": 1000 * seconds / spec["steps"], "mfu": mfu,
            "mfu_done": mfu_done, "flops_per_token_done": done,
            **({"mfu_full_head": full} if spec["side"] == "hf" else {}), **memory,
            "flops_per_token": flops_per_token(hf_config, spec["seq_len"], mask_prob),
            "num_hidden_layers": hf_config.num_hidden_layers, "hidden_size": hf_config.hidden_size,
            "vocab_size": hf_config.vocab_size, **extra}


if __name__ == "__main__":
    sys.exit(main())
