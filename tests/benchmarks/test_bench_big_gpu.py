"""benchmarks/bench_big_gpu.py keeps working (issue 54's 8B and 3B rows on a GPU): benchmarks/gpu_session.sh's
decoder_big step rehearsed on the CPU with the tiny shape, phase 1 under ZeRO-3 and phase 2 under ZeRO-1, through
the trainer's command line. CPU figures of a tiny model are no measurement; this checks the rows are complete."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

from conftest import REPO

pytestmark = pytest.mark.multiproc


def test_the_decoder_big_step_times_the_first_step_and_the_timed_steps_then_stops(tmp_path, corpus):
    env = {**os.environ, "SESSION_STEPS": "decoder_big", "BIG_DATA": str(corpus), "SOURCES": str(tmp_path / "src")}
    proc = subprocess.run(["bash", "benchmarks/gpu_session.sh", str(tmp_path / "out"), "--rehearse"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    out = tmp_path / "out"
    assert proc.returncode == 0 and (out / "DONE").is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (out / "steps.tsv").read_text().split("\t")[:2] == ["decoder_big", "0"], \
        (out / "decoder_big.log").read_text()[-3000:]
    result = json.loads((out / "decoder_big/bench_big_gpu.json").read_text())
    assert result["device"] == "cpu" and [r["row"] for r in result["rows"]] == ["tiny_p1", "tiny_p2"]
    for row in result["rows"]:
        # stopped at its last timed step's line (a tiny run may finish its one spare step and save first)
        assert (row["stopped"] or row["rc"] == 0) and row["timed_steps"] == 2, row
        assert len(row["loss_first_last"]) == 2, row
        assert 0 < row["ready_s"] < row["first_step_s"] and row["tokens_per_s"] > 0 and row["host_peak_gib"] > 0
        assert row["mfu"] is None and row["nvidia_smi_peak_gib"] is None  # no GPU here
    assert [r["engine"] for r in result["rows"]] == ["zero3_fp32", "zero1_fp32"]
    assert not (out / "decoder_big/run_tiny_p1").exists()  # the run folder is gone
    assert "| tiny_p2 | zero1_fp32 | 64 x 2 |" in (out / "decoder_big.log").read_text()
    # phase 1 trained the preset (the source's layers frozen), phase 2 every parameter
    logs = {r: (out / f"decoder_big/train_{r}.log").read_text() for r in ("tiny_p1", "tiny_p2")}
    assert "phase 'phase1' trains" in logs["tiny_p1"] and "phase 'phase2' trains" in logs["tiny_p2"]
    assert (tmp_path / "src/llama-tiny/config.json").is_file()  # written once, outside OUT, for the next row
    with tarfile.open(out / "results.tgz") as tgz:
        assert "./decoder_big/bench_big_gpu.json" in tgz.getnames()


def test_a_corpus_that_is_not_prepared_is_named(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/bench_big_gpu.py", "--data", str(tmp_path), "--out",
                           str(tmp_path / "o"), "--rows", "tiny_p1"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0 and f"--data {tmp_path} has no manifest.json" in proc.stderr
    proc = subprocess.run([sys.executable, "benchmarks/bench_big_gpu.py", "--data", str(tmp_path), "--out",
                           str(tmp_path / "o"), "--rows", "8b_p3"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0 and "unknown row(s) 8b_p3" in proc.stderr


def test_the_sources_have_the_shapes_of_the_models_they_stand_for():
    """Llama-3.1-8B has 8,030,261,248 parameters and Llama-3.2-3B 3,212,749,824 (their hub configs)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_big_gpu import SOURCES

    counts = {}
    for shape in ("8b", "3b"):
        with torch.device("meta"):
            counts[shape] = sum(p.numel() for p in LlamaForCausalLM(LlamaConfig(**SOURCES[shape])).parameters())
    assert counts == {"8b": 8_030_261_248, "3b": 3_212_749_824}


def test_ready_only_stops_at_the_built_and_filled_engine(tmp_path, corpus):
    """``--ready-only`` (an 8B row on a CPU): the run is stopped at the trainer's ready line and the row is done
    with its time to it (a tiny run may take its steps in the sampler's 0.2 s before it is stopped)."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "benchmarks/bench_big_gpu.py", "--data", str(corpus), "--out",
                           str(tmp_path), "--rows", "tiny_p1", "--seq-len", "64", "--micro-batch", "2",
                           "--ready-only"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads((tmp_path / "bench_big_gpu.json").read_text())["rows"]
    assert row["ready_s"] > 0 and (row["stopped"] or row["rc"] == 0) and "last_log" not in row
    assert "| tiny_p1 | zero3_fp32 | 64 x 2 |" in proc.stdout
