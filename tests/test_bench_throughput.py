"""benchmarks/bench_throughput.py keeps working: --tiny on CPU, both trainers, both phases (one length: each
side and phase is its own process, ~8 s of imports each).

CPU numbers are no performance claim; this checks the comparison is built as documented (same model and
trainable set on both sides, both under a ZeRO-2 bf16 DeepSpeed engine) and that the report is complete."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

SEQ_LENS, PHASES = (32,), (1, 2)


def test_tiny_cpu_run_reports_both_trainers_for_every_length_and_phase(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TORCHDYNAMO_DISABLE": "1"}
    proc = subprocess.run([sys.executable, "benchmarks/bench_throughput.py", "--tiny", "--seq-lens",
                           *map(str, SEQ_LENS), "--steps", "2", "--warmup", "1", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {(r["side"], r["seq_len"], r["phase"]): r for r in report["results"]}
    assert set(rows) == {(s, n, p) for s in ("hf", "xpt") for n in SEQ_LENS for p in PHASES}
    for r in rows.values():
        assert r["tokens_per_s"] > 0 and r["step_ms"] > 0 and r["peak_memory_gib"] > 0
        assert r["mfu"] is None and r["memory_kind"] == "host_rss"  # CPU: no peak FLOP/s, host memory
        assert r["engine"]["class"] == "DeepSpeedEngine" and r["engine"]["zero_stage"] == 2
        assert r["engine"]["module_dtype"] == "bfloat16" and r["engine"]["base_optimizer"] == "AdamW"
        assert r["num_hidden_layers"] == 4  # 2 source layers + 2 ITLs
    for n in SEQ_LENS:
        for p in PHASES:
            xpt, hf = rows["xpt", n, p], rows["hf", n, p]
            assert xpt["vs_hf"] == pytest.approx(xpt["tokens_per_s"] / hf["tokens_per_s"])
            assert (xpt["n_params"], xpt["n_trainable"]) == (hf["n_params"], hf["n_trainable"])
            assert xpt["micro_batch"] == hf["micro_batch"] == 256 // n
        for side in ("hf", "xpt"):
            one, two = rows[side, n, 1], rows[side, n, 2]
            assert one["vs_phase2"] == pytest.approx(one["tokens_per_s"] / two["tokens_per_s"])
            assert 0 < one["n_trainable"] < two["n_trainable"] == two["n_params"]
    assert "| 32 | 8 | 2 | xpt_ds |" in proc.stdout  # the markdown table for BENCHMARKS.md
