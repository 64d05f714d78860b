"""Large decoder sources on one GPU, through the trainer's command line as a user runs it (issue 54's 8B and 3B
rows): the time to the first step, tokens/s, MFU and GPU memory.

Rows (``ROWS``), each one phase of ``method: xpt`` in one process:

- ``8b_p1``: a Llama-3.1-8B-shaped source (hidden 4096, 32 layers, FFN 14,336, 32/8 heads, vocabulary 128,256,
  untied head), XPT's phase 1 (the method's preset: the ITLs, the new embeddings and head train, the source's
  layers are frozen) under ``ds_configs/zero3_bf16.json``;
- ``3b_p2``: a Llama-3.2-3B-shaped source (benchmarks/bench_build.py's), XPT's phase 2 (``@all``) under
  ``ds_configs/zero1_bf16_lean.json``;
- ``tiny_p1``, ``tiny_p2``: the same two on bench_build's tiny shape, on the CPU (fp32 engine JSONs, torch Adam),
  so that tests/benchmarks/test_bench_big_gpu.py keeps the script working; their figures measure nothing.

Sources have random bf16 weights in the hub's layout (``bench_build.write_llama``, drawn on the GPU when there is
one), written once into ``--sources`` before any clock starts: the trainer reads them from the page cache, so a
cluster's cold file system adds its read time to the figures here. The target is a prepared corpus (``--data``:
``manifest.json`` and ``spm.model`` from ``data_tools.cli.prepare``; the GPU session carries UA-GEC's with 32,000
pieces, ``launch/gpu_big_payload.sh``), ``--seq-len`` tokens a row, ``--micro-batch`` rows a step, FusedAdam.

A phase has ``--warmup`` + ``--steps`` + 1 steps, and the run is stopped at the line of its last timed step, so
the phase-end checkpoint is neither written nor measured. Per row (``OUT/bench_big_gpu.json``):

- ``ready_s``: from the command's start to the trainer's "model: N parameters" line (engine built and filled);
- ``first_step_s``: to step 1's record in ``metrics.jsonl`` (issue 54's goal at 8B: at most 90 s);
- ``tokens_per_s``, ``mfu``: the trainer's own ``train/tokens_per_s`` and ``train/mfu`` (6·N + 12·L·d·T per token
  against ``logging.peak_tflops``, 989 TFLOP/s on CUDA unless set), their mean over the timed steps;
- ``gpu_peak_allocated_gib``: the largest ``mem/gpu_peak_allocated_gib`` of the records (torch's allocator);
  ``nvidia_smi_peak_gib``: the most memory nvidia-smi saw used on the GPU, sampled every 0.5 s (what the issue's
  table reports);
- ``host_peak_gib``: the job's peak anonymous memory (job_watch.py's sampler, ``Pss_Anon``).

``--ready-only`` stops each run at its ready line instead: the build alone, which is what a CPU can measure of
the 8B row (BENCHMARKS.md, "Building large sources").

    python benchmarks/bench_big_gpu.py --data DIR --out OUT [--rows 8b_p1,3b_p2] [--sources DIR]
                                       [--micro-batch 4] [--seq-len 2048] [--steps 10] [--warmup 3] [--ready-only]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_build import GIB, LLAMA_32, REPO, SHAPES, write_llama  # noqa: E402
from job_watch import first, log_times, peaks, run_job  # noqa: E402

LLAMA_31_8B = dict(LLAMA_32, hidden_size=4096, num_hidden_layers=32, intermediate_size=14336, num_attention_heads=32,
                   num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                   rope_scaling={**LLAMA_32["rope_scaling"], "factor": 8.0})
TINY = dict(SHAPES["tiny"], tie_word_embeddings=True, bos_token_id=0, eos_token_id=2, hidden_act="silu")
SOURCES = {"8b": LLAMA_31_8B, "3b": {**LLAMA_32, **SHAPES["3b"]}, "tiny": TINY}
READY = r"model: [\d,]+ parameters; phase"  # the trainer's line once the engine is built and filled
ROWS = {
    "8b_p1": dict(source="8b", phase="phase1", trainable=[], engine="zero3_bf16"),
    "3b_p2": dict(source="3b", phase="phase2", trainable=["@all"], engine="zero1_bf16_lean"),
    "tiny_p1": dict(source="tiny", phase="phase1", trainable=[], engine="zero3_fp32"),
    "tiny_p2": dict(source="tiny", phase="phase2", trainable=["@all"], engine="zero1_fp32"),
}


def on_cuda() -> bool:
    return os.environ.get("DS_ACCELERATOR", "cuda") != "cpu" and shutil.which("nvidia-smi") is not None


def run_config(path: Path, run_dir: Path, source: Path, data: Path, row: dict, a: argparse.Namespace) -> Path:
    import yaml
    cuda = on_cuda()
    phase = {"name": row["phase"], "steps": a.warmup + a.steps + 1, "lr": 1e-4, "warmup_steps": 0,
             **({"trainable": row["trainable"]} if row["trainable"] else {})}
    cfg = {"run_dir": str(run_dir), "deepspeed": str(REPO / f"ds_configs/{row['engine']}.json"),
           "model": {"source": str(source), "tokenizer": str(data / "spm.model"), "method": "xpt",
                     **({"attention": a.attention} if a.attention else {})},
           "phases": [phase],
           "data": {"train_shards": [f"{data}/manifest.json:train"], "seq_len": a.seq_len, "num_workers": 2},
           "optim": {"micro_batch_size": a.micro_batch, "grad_accum": 1, "torch_adam": not cuda},
           "checkpoint": {"every_steps": 0, "keep_last": 1},
           "logging": {"log_every": 1, "eval_every": 0, "progress_bar": False, "tensorboard": False}}
    path.write_text(yaml.safe_dump(cfg))
    return path


class GpuMemory(threading.Thread):
    """The most GPU memory nvidia-smi reports used (MiB, GPU 0) while it runs; None without nvidia-smi."""

    def __init__(self, period: float = 0.5):
        super().__init__(daemon=True)
        self.period, self.peak_mib, self.done = period, None, threading.Event()

    def run(self) -> None:
        while shutil.which("nvidia-smi") and not self.done.is_set():
            got = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True)
            if got.returncode == 0 and got.stdout.strip():
                self.peak_mib = max(self.peak_mib or 0, int(got.stdout.split()[0]))
            self.done.wait(self.period)


def records(run_dir: Path) -> dict[int, dict]:
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return {r["step"]: r for r in rows if "train/loss" in r}


def measure(name: str, source: Path, data: Path, out: Path, a: argparse.Namespace) -> dict:
    row = ROWS[name]
    run_dir = out / f"run_{name}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = run_config(out / f"cfg_{name}.yaml", run_dir, source, data, row, a)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
    last = a.warmup + a.steps
    log = out / f"train_{name}.log"
    gpu = GpuMemory()
    gpu.start()
    job = run_job([sys.executable, "-m", "xpt_ds.cli.train", "--config", str(cfg)], env, log,
                  int(a.cap_gib * GIB), timeout=a.timeout, stop_at=READY if a.ready_only else rf"step {last}/\d+: ")
    gpu.done.set()
    gpu.join()
    t0, steps = job["started"], records(run_dir)
    ready = first(log_times(log), READY)
    timed = [steps[s] for s in range(a.warmup + 1, last + 1) if s in steps]
    result = {"row": name, **row, "seq_len": a.seq_len, "micro_batch": a.micro_batch,
              "timed_steps": len(timed), "rc": job["rc"], "stopped": job["stopped"] is not None,
              "killed": job["killed"] is not None, "ready_s": None if ready is None else ready - t0,
              "first_step_s": steps[1]["time"] - t0 if 1 in steps else None,
              "tokens_per_s": _mean(timed, "train/tokens_per_s"), "mfu": _mean(timed, "train/mfu"),
              "loss_first_last": [steps[s]["train/loss"] for s in (1, last) if s in steps],
              "gpu_peak_allocated_gib": max((r.get("mem/gpu_peak_allocated_gib") or 0 for r in steps.values()),
                                            default=0) or None,
              "nvidia_smi_peak_gib": None if gpu.peak_mib is None else gpu.peak_mib / 1024,
              "host_peak_gib": peaks(job["samples"])["job_anon_gib"]}
    if len(timed) < a.steps and not a.ready_only:  # it failed or ran out of time: the log's end says why
        result["last_log"] = log.read_text(errors="replace").splitlines()[-5:]
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def _mean(records: list[dict], key: str) -> float | None:
    """The mean of ``key`` over ``records``; None when any lacks it (MFU on a CPU) or there are none."""
    values = [r.get(key) for r in records]
    return statistics.fmean(values) if values and None not in values else None


def _f(x, fmt="{:.1f}") -> str:
    return "" if x is None else fmt.format(x)


def table(rows: list[dict]) -> str:
    lines = ["| row | engine | seq x rows | ready s | first step s | tokens/s | MFU | GPU peak allocated GiB | "
             "nvidia-smi peak GiB | host peak GiB |", "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['row']} | {r['engine']} | {r['seq_len']} x {r['micro_batch']} | {_f(r['ready_s'])} | "
                     f"{_f(r['first_step_s'])} | {_f(r['tokens_per_s'], '{:,.0f}')} | "
                     f"{_f(None if r['mfu'] is None else 100 * r['mfu'], '{:.1f} %')} | "
                     f"{_f(r['gpu_peak_allocated_gib'])} | {_f(r['nvidia_smi_peak_gib'])} | "
                     f"{_f(r['host_peak_gib'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a prepared corpus: manifest.json and spm.model")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", default="8b_p1,3b_p2", help=f"comma-separated, of {', '.join(ROWS)}")
    ap.add_argument("--sources", type=Path, help="where the sources are written once and reused (default OUT/sources)")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--attention", default="", help="model.attention (default: the config's)")
    ap.add_argument("--ready-only", action="store_true", help="stop each run at its ready line: the build alone "
                    "(an 8B row on a CPU, whose steps would take hours)")
    ap.add_argument("--timeout", type=float, default=400, help="seconds before a row's run is killed")
    ap.add_argument("--cap-gib", type=float, default=100, help="host memory at which a row's run is killed")
    a = ap.parse_args(argv)
    names = a.rows.split(",")
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        raise SystemExit(f"bench_big_gpu: unknown row(s) {', '.join(unknown)}; rows are {', '.join(ROWS)}")
    if not (a.data / "manifest.json").is_file() or not (a.data / "spm.model").is_file():
        raise SystemExit(f"bench_big_gpu: --data {a.data} has no manifest.json and spm.model (data_tools.cli.prepare)")
    a.out.mkdir(parents=True, exist_ok=True)
    sources = a.sources or a.out / "sources"
    device = "cuda" if on_cuda() else "cpu"
    result = {"device": device, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": [], "written_s": {}}
    out_json = a.out / "bench_big_gpu.json"
    for name in names:
        shape = ROWS[name]["source"]
        t = time.time()
        source = write_llama(sources / f"llama-{shape}", SOURCES[shape], device=device)
        result["written_s"].setdefault(shape, round(time.time() - t, 1))
        row = measure(name, source, a.data, a.out, a)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        out_json.write_text(json.dumps(result, indent=1))
    print(table(result["rows"]))
    done = (lambda r: r["ready_s"] is not None) if a.ready_only else (
        lambda r: len(r["loss_first_last"]) == 2 and r["timed_steps"] == a.steps)
    return 0 if all(map(done, result["rows"])) else 1


if __name__ == "__main__":
    sys.exit(main())
