"""Building a large source's target, on CPU: time to the first step, host memory per rank, the phase hand-over,
the phase-end checkpoint, a resume and an export, beside transformers' ``from_pretrained`` of the same source.

Sources are Llama-3.2-shaped decoders with random weights, written here once in the hub's layout (bf16
safetensors, files of at most 5 GB, ``model.safetensors.index.json`` when there are several):

- ``1b``: hidden 2048, 16 layers, FFN 8192, 32/8 heads, vocabulary 128,256, tied (Llama-3.2-1B);
- ``3b``: hidden 3072, 28 layers, FFN 8192, 24/8 heads, vocabulary 128,256, tied (Llama-3.2-3B);
- ``gemma3-1b``, ``gemma2-2b`` and ``qwen2.5-1.5b``: other families' real configs (``FAMILIES``: Gemma-3-1B,
  Gemma-2-2B, Qwen2.5-1.5B), tied, trained as the ``1b`` rows are (``gemma2-2b`` as the ``3b`` rows).

The target language is UA-GEC's Ukrainian text with a 32,000-piece SentencePiece vocabulary. Each run is ``method:
xpt`` (``--method lora``: LoRA beside the new rows, its one phase; ``--method extend``: the source's vocabulary with
8,000 target pieces appended by ``xpt-data extend-vocab``, the text prepared in its ids, the new rows starting from
``subword_mean``; the source tokenizer it extends is ``extend_inputs.py``'s) through the trainer's command line as a
user runs it: one process with ``zero1_fp32`` at world 1, two ranks of torchrun with ``zero3_fp32`` at world 2
(fp32: this CPU has no bf16 matmul; ``torch_adam``), sequence 128, one row a step. The ``1b`` runs train 2 steps of
phase 1 and 1 of phase 2 (the hand-over between); the ``3b`` runs train phase 1 only (2 steps). XPT's phase 2 trains
every parameter, whose fp32 weights, master, gradient and Adam moments (some 20 bytes a parameter: 23 GB at 1B) are
more than this machine holds at any world size, so the benchmark's phase 2 trains ``@new`` and ``@upper`` (the ITLs,
the new rows and the upper half of the source's layers, 0.6B of 1.16B; extend: ``@new_rows`` and ``@upper``): the
hand-over still moves every value into a new engine. A run is stopped once phase 2's engine is built and filled (its
"phase 'phase2' starts" line); phase 2's step is not measured. Then the same command runs again, resuming from the
phase-end checkpoint (stopped at its "resumed from" line: the load), and ``xpt-ds export`` writes the model.

Host memory is sampled every 0.2 s from ``/proc/PID/smaps_rollup`` of every process of the job: ``Pss_Anon``
(memory the process owns, a page shared with a forked DataLoader worker counted half in each) and ``Pss_File``
(file pages it has mapped, such as the source's safetensors: page cache the kernel can drop, shared by the
ranks). A rank's figure is that of its processes together: the rank and the DataLoader workers it forks (a
worker forked after the model was built shares its pages, which ``Pss`` splits between the two). A job whose
processes together own more than ``--cap-gib`` GiB of anonymous memory (Pss_Anon) is killed: the row then says where it
was and how much it held (the machine has 24 GiB and no swap).

The peer, in its own process: ``AutoModelForCausalLM.from_pretrained(SOURCE, dtype=torch.float32)`` then
``resize_token_embeddings(32000)``, what a user of the stock path runs before training; its wall time includes
the imports, as the trainer's time to its first step does.

    python benchmarks/bench_build.py --out /tmp/bench_build [--shapes 1b,3b] [--worlds 1,2] [--code DIR]
                                     [--label after] [--cap-gib 21] [--method lora|extend]
                                     (--shapes also takes gemma3-1b, gemma2-2b and qwen2.5-1.5b)

``--code DIR`` runs the trainer of another checkout (``git worktree add DIR COMMIT``: the before figures); the
sources and data are the same files. Results: ``OUT/LABEL.json`` and a Markdown table on stdout
(``benchmarks/build_report.py`` prints it again from the file).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from build_report import GIB, table  # this folder's: the Markdown table of a result
from extend_inputs import extended_inputs, write_llama3_tokenizer
from job_watch import first, log_times, peaks, run_job, step_times, timeline

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPES = {
    "1b": dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=8192, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64),
    "3b": dict(hidden_size=3072, num_hidden_layers=28, intermediate_size=8192, num_attention_heads=24,
               num_key_value_heads=8, head_dim=128),
    # tests/benchmarks/test_bench_build.py: the script keeps working (no measurement)
    "tiny": dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=32, vocab_size=300, max_position_embeddings=256),
}
LLAMA_32 = dict(vocab_size=128256, tie_word_embeddings=True, max_position_embeddings=131072, rms_norm_eps=1e-5,
                rope_theta=500000.0, bos_token_id=128000, eos_token_id=128001, initializer_range=0.02,
                hidden_act="silu", rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"})
# Other families' real configs (999,885,952, 2,614,341,888 and 1,543,714,304 parameters, the published counts; random
# weights as for Llama). They differ in what a Llama shape does not test (Gemma 3: a 262,144-row vocabulary, head_dim
# 256, sliding windows in 5 of every 6 layers, q/k norms, scaled embeddings; Gemma 2: softcapped attention scores and
# logits, windows of 4,096 in every other layer; Qwen2.5: biases on q, k and v).
FAMILIES = {
    "gemma3-1b": ("gemma3_text", dict(
        vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
        num_key_value_heads=1, head_dim=256, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
        rope_local_base_freq=10000.0, sliding_window=512, query_pre_attn_scalar=256, initializer_range=0.02,
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, bos_token_id=2, eos_token_id=1,
        pad_token_id=0)),
    "gemma2-2b": ("gemma2", dict(
        vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0,
        sliding_window=4096, query_pre_attn_scalar=256, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        initializer_range=0.02, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, bos_token_id=2,
        eos_token_id=1, pad_token_id=0)),
    "qwen2.5-1.5b": ("qwen2", dict(
        vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
        num_key_value_heads=2, max_position_embeddings=131072, rope_theta=1e6, rms_norm_eps=1e-6,
        initializer_range=0.02, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151643,
        hidden_act="silu", use_sliding_window=False)),
}
TARGET_VOCAB = 32000


# ---------------------------------------------------------------------------------------------- inputs

def write_source(out: Path, shape: str) -> Path:
    """A Llama-3.2-shaped source (or one of ``FAMILIES``) with random bf16 weights in the hub's layout
    (``write_random``)."""
    if shape in FAMILIES:
        from transformers import AutoConfig
        model_type, settings = FAMILIES[shape]
        return write_random(out, AutoConfig.for_model(model_type, **settings, dtype="bfloat16"))
    settings = {**LLAMA_32, **SHAPES[shape]}
    if shape == "tiny":  # no llama3 rope scaling over 256 positions, special ids inside the 300-word vocabulary
        del settings["rope_scaling"]
        settings.update(bos_token_id=0, eos_token_id=2)
    return write_llama(out, settings)


def write_llama(out: Path, settings: dict, device: str = "cpu") -> Path:
    """A Llama source of ``settings`` (LlamaConfig keys): ``write_random``."""
    from transformers import LlamaConfig
    return write_random(out, LlamaConfig(**settings, dtype="bfloat16"), device)


def write_random(out: Path, config, device: str = "cpu") -> Path:
    """A decoder of ``config`` with random bf16 weights (N(0, 0.02); norms 1, or 0 where the family's norm scales
    by 1 + weight, as Gemma's does) in the hub's layout, written to a side folder and renamed to ``out`` when
    complete; an existing ``out`` is kept. The values are drawn on ``device`` (``cuda``: seconds for an 8B source,
    which the CPU draws in minutes)."""
    import torch
    from transformers import AutoModelForCausalLM

    from xpt_ds.io.safetensors_files import ShardedWriter
    if (out / "config.json").is_file():
        return out
    tmp = out.with_name(out.name + ".writing")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    norm_one = 0.0 if config.model_type.startswith("gemma") else 1.0
    specs = [(n, tuple(p.shape), torch.bfloat16) for n, p in skeleton.named_parameters()]
    writer = ShardedWriter(tmp, specs)
    g = torch.Generator(device).manual_seed(0)
    for name, shp, _ in specs:
        value = torch.full(shp, norm_one) if name.endswith("norm.weight") else \
            torch.empty(shp, device=device).normal_(0, 0.02, generator=g).to(torch.bfloat16)
        writer.write(name, value)
    writer.close()
    config.save_pretrained(tmp)
    tmp.rename(out)
    return out


def uagec_text(out: Path) -> Path:
    """UA-GEC's corrected train text (``data_tools.cli.uagec``)."""
    if not (out / "uagec/text/train.txt").is_file():
        subprocess.run([sys.executable, "-m", "data_tools.cli.uagec", "--out", str(out / "uagec")], cwd=REPO,
                       check=True, capture_output=True)
    return out / "uagec/text/train.txt"


def prepare_data(out: Path) -> Path:
    """UA-GEC's corrected train text, prepared with a 32,000-piece vocabulary in the decoder layout."""
    if (out / "uk" / "manifest.json").is_file():
        return out / "uk"
    subprocess.run([sys.executable, "-m", "data_tools.cli.prepare", "--input", str(uagec_text(out)),
                    "--out", str(out / "uk"), "--vocab-size", str(TARGET_VOCAB), "--valid", "0.02", "--test", "0.02",
                    "--family", "roberta"], cwd=REPO, check=True, capture_output=True)
    return out / "uk"


def phases_for(method: str, shape: str, asked: int = 0) -> int:
    """Phases a row trains: LoRA has one; XPT two at 1B (the hand-over), one at 3B and Gemma-2-2B (their phase 2
    does not fit in this machine's 24 GiB: gemma2-2b's hand-over was killed at 21.2 GiB), unless ``asked``."""
    return 1 if method == "lora" else asked or (1 if shape in ("3b", "gemma2-2b") else 2)


def run_config(path: Path, run_dir: Path, source: Path, data: Path, shape: str, world: int, phases_n: int,
               method: str = "xpt", tokenizer: Path | None = None) -> Path:
    import yaml
    phases = [{"name": "phase1", "steps": 2, "lr": 1e-4, "warmup_steps": 0}]
    if phases_n == 2:  # XPT's (and extend's) phase 2 trains @all: see the module docstring
        phases.append({"name": "phase2", "steps": 1, "lr": 1e-5, "warmup_steps": 0,
                       "trainable": ["@new_rows", "@upper"] if method == "extend" else ["@new", "@upper"]})
    model = {"source": str(source), "tokenizer": str(tokenizer or data / "spm.model"), "method": method}
    if method == "extend":
        model["embedding_init"] = "subword_mean"  # EEVE's and SambaLingo's start (launch/configs/extend_eeve.yaml)
    cfg = {"run_dir": str(run_dir),
           "deepspeed": str(REPO / ("ds_configs/zero1_fp32.json" if world == 1 else "ds_configs/zero3_fp32.json")),
           "model": model,
           "phases": phases,
           "data": {"train_shards": [f"{data}/manifest.json:train"], "seq_len": 128, "num_workers": 0},
           "optim": {"micro_batch_size": 1, "grad_accum": 1, "torch_adam": True},
           "checkpoint": {"every_steps": 0, "keep_last": 1},
           "logging": {"log_every": 1, "eval_every": 0, "progress_bar": False, "tensorboard": False}}
    path.write_text(yaml.safe_dump(cfg))
    return path


# ---------------------------------------------------------------------------------------------- the rows

def trainer_env(code: Path) -> dict:
    return {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TORCHDYNAMO_DISABLE": "1",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(code)}


def train_cmd(cfg: Path, world: int) -> list[str]:
    if world == 1:
        return [sys.executable, "-m", "xpt_ds.cli.train", "--config", str(cfg)]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world), "--master_port",
            str(29500 + os.getpid() % 1000), "-m", "xpt_ds.cli.train", "--config", str(cfg)]


def measure_trainer(work: Path, code: Path, source: Path, data: Path, shape: str, world: int, cap: int,
                    phases_n: int, method: str = "xpt", tokenizer: Path | None = None) -> dict:
    run_dir = work / f"run_{shape}_w{world}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = run_config(work / f"cfg_{shape}_w{world}.yaml", run_dir, source, data, shape, world, phases_n, method,
                     tokenizer)
    env = trainer_env(code)
    row: dict = {"shape": shape, "world": world, "phases": phases_n, "method": method}
    # the hand-over is measured to phase 2's first line: its first step would allocate Adam moments for every
    # parameter (16 bytes each, 18.6 GB at 1B), more than this machine holds at any world size
    job = run_job(train_cmd(cfg, world), env, work / f"train_{shape}_w{world}.log", cap, timeout=3600, cwd=code,
                  stop_at=r"phase 'phase2' starts")
    lines = log_times(work / f"train_{shape}_w{world}.log")
    steps = step_times(run_dir)
    row["rc"], row["killed"] = job["rc"], job["killed"]
    row["timeline"] = timeline(job["samples"], job["started"])
    t0 = job["started"]
    ready = first(lines, r"model: [\d,]+ parameters; phase")
    row["ready_s"] = None if ready is None else ready - t0
    row["first_step_s"] = steps[1] - t0 if 1 in steps else None
    row["to_first_step"] = peaks(job["samples"], end=steps.get(1, job["ended"]))
    if job["killed"]:
        row["killed_after_s"] = job["killed"][0] - t0
        row["killed_job_anon_gib"] = job["killed"][1] / GIB
        row["at_kill"] = peaks(job["samples"])
        row["last_log"] = lines[-1][1][:200] if lines else ""
        return row
    saved = [t for t, msg in lines if "saved checkpoint" in msg]
    if 2 in steps and saved:
        row["phase1_end_save_s"] = saved[0] - steps[2]
    switch = first(lines, r"phase 'phase2' starts", after=steps.get(2, 0))
    if switch is not None:  # the hand-over: from the end of phase 1's checkpoint to phase 2's first line
        row["handover_s"] = switch - (saved[0] if saved else steps[2])
        row["handover"] = peaks(job["samples"], start=steps[2], end=switch)
    row["train_peak"] = peaks(job["samples"])
    # the same command again: resumes from the phase-end checkpoint (measured to its "resumed from" line)
    job = run_job(train_cmd(cfg, world), env, work / f"resume_{shape}_w{world}.log", cap, timeout=3600, cwd=code,
                  stop_at=r"resumed from")
    lines = log_times(work / f"resume_{shape}_w{world}.log")
    resumed = first(lines, r"resumed from")
    row["resume"] = {"rc": job["rc"], "killed": job["killed"], "wall_s": job["ended"] - job["started"],
                     "to_resumed_s": None if resumed is None else resumed - job["started"],
                     "peak": peaks(job["samples"])}
    out = work / f"export_{shape}_w{world}"
    shutil.rmtree(out, ignore_errors=True)
    job = run_job([sys.executable, "-m", "xpt_ds.cli.export", "--run", str(run_dir), "--out", str(out)], env,
                  work / f"export_{shape}_w{world}.log", cap, timeout=3600, cwd=code)
    row["export"] = {"rc": job["rc"], "killed": job["killed"], "wall_s": job["ended"] - job["started"],
                     "peak": peaks(job["samples"]),
                     "files": sorted(p.name for p in out.iterdir()) if out.is_dir() else []}
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    return row


HF_PEER = ("import sys, time, torch; t = time.time(); from transformers import AutoModelForCausalLM; "
           "m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32); "
           "m.resize_token_embeddings(int(sys.argv[2])); print('from_pretrained', time.time() - t)")


def measure_hf(work: Path, source: Path, shape: str, cap: int, rows: int = TARGET_VOCAB) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    job = run_job([sys.executable, "-c", HF_PEER, str(source), str(rows)], env, work / f"hf_{shape}.log",
                  cap, timeout=3600)
    return {"shape": shape, "rc": job["rc"], "killed": job["killed"], "wall_s": job["ended"] - job["started"],
            "peak": peaks(job["samples"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default="1b,3b")
    ap.add_argument("--worlds", default="1,2")
    ap.add_argument("--code", type=Path, default=REPO, help="checkout whose xpt_ds the trainer runs")
    ap.add_argument("--label", default="after")
    ap.add_argument("--cap-gib", type=float, default=21.0)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--data", type=Path, help="a prepared corpus (manifest.json, spm.model) instead of UA-GEC's")
    ap.add_argument("--method", default="xpt", choices=("xpt", "lora", "extend"),
                    help="xpt (default), lora: LoRA beside the new rows, one phase (needs peft), or extend: the "
                    "source's vocabulary with 8,000 target pieces appended (its own inputs; 1b and 3b only)")
    ap.add_argument("--phases", type=int, default=0, help="phases to train: 2 (the hand-over) or 1; default 2 for "
                    "1b, 1 for 3b")
    a = ap.parse_args()
    if a.method == "extend" and (a.data or set(a.shapes.split(",")) - {"1b", "3b"}):
        ap.error("--method extend makes its own tokenizer and data for Llama 3's vocabulary: shapes 1b and 3b, "
                 "no --data")
    a.out.mkdir(parents=True, exist_ok=True)
    cap = int(a.cap_gib * GIB)
    data = a.data or (None if a.method == "extend" else prepare_data(a.out / "data"))
    code_rev = subprocess.run(["git", "-C", str(a.code), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    a.code = a.code.resolve()
    result = {"label": a.label, "code": str(a.code), "commit": code_rev, "machine": platform.processor() or
              platform.machine(), "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "rows": [], "hf": []}
    out_json = a.out / f"{a.label}.json"
    for shape in a.shapes.split(","):
        source = write_source(a.out / "sources" / shape, shape)
        tokenizer, rows = None, TARGET_VOCAB
        if a.method == "extend":  # the source's tokenizer, extended, and the text in its ids (shared by the shapes)
            result["source_tokenizer"] = write_llama3_tokenizer(source)
            tokenizer, data, result["extend"] = extended_inputs(a.out / "data", source, uagec_text(a.out / "data"))
            rows = result["extend"]["size"]
        if not a.skip_hf:
            result["hf"].append(measure_hf(a.out, source, shape, cap, rows))
            out_json.write_text(json.dumps(result, indent=1))
        for world in map(int, a.worlds.split(",")):
            phases_n = phases_for(a.method, shape, a.phases)
            row = measure_trainer(a.out, a.code, source, data, shape, world, cap, phases_n, a.method, tokenizer)
            result["rows"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("samples",)}, default=str)[:2000],
                  flush=True)
            out_json.write_text(json.dumps(result, indent=1, default=str))
    print(table(result))


if __name__ == "__main__":
    main()
