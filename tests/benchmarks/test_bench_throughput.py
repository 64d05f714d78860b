"""benchmarks/gpu_session.sh (which runs benchmarks/bench_throughput.py) keeps working: its --rehearse mode on
CPU runs every step the GPU session runs, with the tiny model: both trainers at both phases, the optimisation
rows with their profiles, the larger-micro-batch table (its HF row), the largest-micro-batch search, and the
collection of tests/gpu.

CPU numbers are no performance claim; this checks the comparison is built as documented (same model and
trainable set on both sides, both under a ZeRO-2 bf16 DeepSpeed engine) and that the reports are complete."""
import json
import os
import subprocess
import tarfile

import pytest

from conftest import REPO

SEQ_LENS, PHASES = (32,), (1, 2)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_session")
    env = {k: v for k, v in os.environ.items() if k != "XPT_GPU_TESTS_ON_CPU"}
    proc = subprocess.run(["bash", "benchmarks/gpu_session.sh", str(out), "--rehearse"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    steps = {line.split("\t")[0]: line.split("\t")[1] for line in (out / "steps.tsv").read_text().splitlines()}
    failed = {name: (out / f"{name}.log").read_text()[-3000:] for name, rc in steps.items() if rc != "0"}
    assert not failed, failed
    assert set(steps) == {"bench_main", "gpu_tests", "bench_variants", "bench_big", "bench_max_batch"}
    assert (out / "DONE").exists()
    with tarfile.open(out / "results.tgz") as tar:  # the one file a device call brings back
        packed = set(tar.getnames())
    assert {"./steps.tsv", "./bench_main.json", "./gpu_tests.log"} <= packed
    assert any(n.startswith("./profiles/profile-") for n in packed)
    return out


def test_main_table_reports_both_trainers_for_every_length_and_phase(session):
    report = json.loads((session / "bench_main.json").read_text())
    rows = {(r["side"], r["variant"], r["seq_len"], r["phase"]): r for r in report["results"]}
    assert set(rows) == {(s, "", n, p) for s in ("hf", "xpt") for n in SEQ_LENS for p in PHASES}
    for r in rows.values():
        assert r["tokens_per_s"] > 0 and r["step_ms"] > 0 and r["peak_memory_gib"] > 0
        assert r["mfu"] is None and r["memory_kind"] == "host_rss"  # CPU: no peak FLOP/s, host memory
        assert r["engine"]["class"] == "DeepSpeedEngine" and r["engine"]["zero_stage"] == 2
        # torch's AdamW both; xpt-ds steps it a slice at a time (xpt_ds.training.adamw), the same values
        assert r["engine"]["module_dtype"] == "bfloat16"
        assert r["engine"]["base_optimizer"] == {"hf": "AdamW", "xpt": "ChunkedAdamW"}[r["side"]]
        # ds_configs/zero2_bf16.json as DeepSpeed took it, clipping at optim.grad_clip on both sides
        assert r["engine"]["bf16"] and not r["engine"]["torch_autocast"] and r["engine"]["gradient_clipping"] == 1.0
        assert r["engine"]["overlap_comm"] and r["engine"]["check_grad_overflow"] and r["engine"]["grad_hooks"] > 0
        assert r["num_hidden_layers"] == 4  # 2 source layers + 2 ITLs
        assert r["optimizer_state_gib"] > 0
    for n in SEQ_LENS:
        for p in PHASES:
            xpt, hf = rows["xpt", "", n, p], rows["hf", "", n, p]
            assert xpt["vs_hf"] == pytest.approx(xpt["tokens_per_s"] / hf["tokens_per_s"])
            assert (xpt["n_params"], xpt["n_trainable"]) == (hf["n_params"], hf["n_trainable"])
            assert xpt["micro_batch"] == hf["micro_batch"] == 256 // n
        for side, variant in (("hf", ""), ("xpt", "")):
            one, two = rows[side, variant, n, 1], rows[side, variant, n, 2]
            assert one["vs_phase2"] == pytest.approx(one["tokens_per_s"] / two["tokens_per_s"])
            assert one["step_vs_phase2"] == pytest.approx(one["step_ms"] / two["step_ms"])
            assert 0 < one["n_trainable"] < two["n_trainable"] == two["n_params"]
            # Phase 1 trains only the new parameters: Adam's state and masters scale with them.
            assert one["optimizer_state_gib"] < 0.75 * two["optimizer_state_gib"]
            assert one["frozen_matmul"] > 0 == two["frozen_matmul"]
    log = (session / "bench_main.log").read_text()
    assert "| 32 | 8 | 2 | xpt_ds |" in log
    # what else ran as each row started (no nvidia-smi on the CI machine: None, not an empty list)
    assert all(isinstance(r["busy"]["load_1m"], float) for r in rows.values())
    assert all(r["busy"]["cpus"] == os.cpu_count() for r in rows.values())


def test_a_report_renders_from_its_file(session, tmp_path):
    """throughput_report.py prints a report's table from the JSON a GPU call brought back, and a report stopped
    mid-table (a session's budget) says so: bench_throughput.py writes the machine and arguments with its first
    row (the 2026-11-27 H200 partial report had only its rows)."""
    import sys
    script = str(REPO / "benchmarks/throughput_report.py")
    done = subprocess.run([sys.executable, script, str(session / "bench_main.json")], capture_output=True,
                          text=True, check=True).stdout
    assert done.strip() in (session / "bench_main.log").read_text()  # the table the run itself printed
    assert "Partial" not in done and "Machine: CPU" in done
    report = json.loads((session / "bench_main.json").read_text())
    partial = {**report, "partial": True, "results": report["results"][:1]}
    (tmp_path / "partial.json").write_text(json.dumps(partial))
    out = subprocess.run([sys.executable, script, str(tmp_path / "partial.json")], capture_output=True, text=True,
                         check=True).stdout
    assert out.count("| 32 | 8 |") == 1 and "Partial: the run stopped before its last row" in out
    (tmp_path / "old.json").write_text(json.dumps({"partial": True, "results": report["results"][:1]}))
    old = subprocess.run([sys.executable, script, str(tmp_path / "old.json")], capture_output=True, text=True)
    assert old.returncode == 1 and old.stderr.strip().endswith("no 'machine' entry (a partial report from before "
                                                               "bench_throughput.py wrote one with its first row)")


def test_rows_started_beside_other_work_are_named():
    import sys
    sys.path.insert(0, str(REPO / "benchmarks"))
    from throughput_report import crowded_rows

    rows = [{"side": "xpt", "variant": "", "seq_len": 512, "phase": 2,
             "busy": {"load_1m": 0.1, "gpu_processes": ["4242, python3, 2048 MiB"]}},
            {"side": "hf", "variant": "", "seq_len": 128, "phase": 1, "busy": {"load_1m": 1e6, "gpu_processes": []}},
            {"side": "xpt", "variant": "lean", "seq_len": 512, "phase": 2, "busy": {"load_1m": 0.0,
                                                                                   "gpu_processes": None}},
            {"side": "hf", "variant": "", "seq_len": 512, "phase": 2},  # a report from before the field
            # the load is judged against the cores of the machine that ran the row, not the one rendering it
            {"side": "xpt", "variant": "", "seq_len": 128, "phase": 2, "busy": {"load_1m": 1.2, "cpus": 16}},
            {"side": "hf", "variant": "", "seq_len": 128, "phase": 2, "busy": {"load_1m": 1.2, "cpus": 2}}]
    assert crowded_rows(rows) == ["xpt 512 phase 2 (GPU: 4242, python3, 2048 MiB)",
                                  "hf 128 phase 1 (host load 1000000.0)", "hf 128 phase 2 (host load 1.2)"]


def test_lean_rows_run_the_shipped_lean_engine_configs():
    """The rows that measured the lean settings on the GPU run the files users get
    (tests/training/test_lean_engine.py)."""
    import sys
    sys.path.insert(0, str(REPO / "benchmarks"))
    from throughput_variants import VARIANTS, engine_json

    shipped = {n: json.loads((REPO / f"ds_configs/{n}.json").read_text())
               for n in ("zero2_bf16_lean", "zero1_bf16_lean")}
    assert engine_json({"precision": "bf16", **VARIANTS["lean"]}) == shipped["zero2_bf16_lean"]
    assert engine_json({"precision": "bf16", **VARIANTS["zero1_lean"]}) == shipped["zero1_bf16_lean"]
    nosync = engine_json({"precision": "bf16", **VARIANTS["nosync"]})
    lean_zero = shipped["zero2_bf16_lean"]["zero_optimization"]
    assert nosync["zero_optimization"] == {**lean_zero, "compute_grad_norm": False}
    assert engine_json({"precision": "bf16"}) == json.loads((REPO / "ds_configs/zero2_bf16.json").read_text())


def test_an_xpt_variant_row_is_set_against_hf_on_the_same_engine_json():
    """--hf-variants: the peer with the same DeepSpeed settings, beside the peer as shipped."""
    import sys
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_throughput import hf_deepspeed_config, parse_args
    from throughput_variants import HF_VARIANTS, VARIANTS
    from throughput_report import add_ratios, markdown

    assert {"lean", "zero1_lean", "zero1", "autocast", "recompute"} <= set(HF_VARIANTS) and "compile" not in HF_VARIANTS
    lean = json.loads((REPO / "ds_configs/zero1_bf16_lean.json").read_text())
    hf_ds = hf_deepspeed_config({"precision": "bf16", "optimizer": "fused", **VARIANTS["zero1_lean"]})
    assert {k: hf_ds[k] for k in lean} == lean and hf_ds["optimizer"]["type"] == "AdamW"  # the HF row's engine
    assert parse_args(["--hf-variants", "zero1_lean"]).hf_variants == ["zero1_lean"]
    with pytest.raises(SystemExit):  # compile changes the model, not the engine: no HF row has it
        parse_args(["--hf-variants", "compile"])
    row = dict(seq_len=512, micro_batch=32, phase=2, step_ms=1.0, mfu=None, peak_memory_gib=1.0)
    rows = [{**row, "side": "hf", "variant": "", "tokens_per_s": 100.0},
            {**row, "side": "xpt", "variant": "", "tokens_per_s": 120.0},
            {**row, "side": "xpt", "variant": "zero1_lean", "tokens_per_s": 180.0},
            {**row, "side": "hf", "variant": "zero1_lean", "tokens_per_s": 150.0}]
    add_ratios(rows)
    hf, xpt, xpt_lean, hf_lean = rows
    assert xpt["vs_hf"] == pytest.approx(1.2) and "vs_hf_same" not in xpt
    assert xpt_lean["vs_hf"] == pytest.approx(1.8) and xpt_lean["vs_hf_same"] == pytest.approx(1.2)
    assert xpt_lean["vs_plain"] == pytest.approx(1.5)
    assert hf_lean["vs_plain"] == pytest.approx(1.5) and "vs_hf" not in hf_lean  # against its own side's plain row
    table = markdown({"machine": dict(device="d", torch="t", transformers="x", deepspeed="s", date="today"),
                      "args": dict(precision="bf16", warmup=1, steps=2), "optimizer": "fused", "peak_tflops": 0,
                      "results": rows}).splitlines()
    assert "| xpt_ds + zero1_lean | 180 |" in table[-2] and "| 1.80x (1.20x same engine) | 1.50x |" in table[-2]
    assert "| HF Trainer + DeepSpeed + zero1_lean | 150 |" in table[-1] and "|  | 1.50x |" in table[-1]


def test_variant_rows_profiles_larger_and_largest_batch(session):
    variants = json.loads((session / "bench_variants.json").read_text())["results"]
    assert [(r["side"], r["variant"]) for r in variants] == [("xpt", ""), ("xpt", "autocast")]
    plain, autocast = variants
    assert autocast["vs_plain"] == pytest.approx(autocast["tokens_per_s"] / plain["tokens_per_s"])
    # The variant's engine JSON replaced the bf16 section by torch_autocast, and the engine ran it so: fp32
    # parameters, bf16 matmuls, no bf16 overflow check.
    assert "bf16" not in autocast["ds_config"] and autocast["ds_config"]["torch_autocast"]["enabled"]
    assert autocast["engine"]["torch_autocast"] and not autocast["engine"]["bf16"]
    assert autocast["engine"]["module_dtype"] == "float32" and autocast["linear_out_dtype"] == "bfloat16"
    assert autocast["engine"]["check_grad_overflow"] is False and plain["engine"]["check_grad_overflow"] is True
    assert plain["engine"]["module_dtype"] == plain["linear_out_dtype"] == "bfloat16"
    for r in variants:
        table = (session / "profiles" / f"profile-xpt{'-' + r['variant'] if r['variant'] else ''}-32-2.txt").read_text()
        assert "Self CPU" in table and r["profile"]["top"] and r["profile"]["device_ms_per_step"] > 0
    big = json.loads((session / "bench_big.json").read_text())["results"]  # the rehearsal runs one HF row
    assert [(r["side"], r["variant"], r["phase"], r["micro_batch"]) for r in big] == [("hf", "zero1_lean", 2, 16)]
    assert big[0]["tokens_per_s"] > 0
    engine = big[0]["engine"]  # --hf-variants: HF Trainer ran the variant's engine JSON, not zero2's
    assert (engine["zero_stage"], engine["grad_hooks"], engine["check_grad_overflow"]) == (1, 0, False)
    largest = json.loads((session / "bench_max_batch.json").read_text())["results"]
    assert {(r["side"], r["phase"]) for r in largest} == {("hf", 2), ("xpt", 2)}
    assert all(r["largest_fit"] == 4 and not r["ran_out"] for r in largest)  # CPU: nothing runs out
    assert "tests/gpu/test_cuda.py" in (session / "gpu_tests.log").read_text()  # collected, skipped on CPU


def test_decoder_rows_set_xpt_against_both_hf_peers_on_the_same_model(tmp_path):
    """``--decoder``: the XPT target of a Llama-layout source on packed rows of several documents, against HF
    Trainer on plain causal rows and with per-document positions (docpos), all on the engine JSON named by
    --engine. (The flex rows need CUDA: FlexAttention has no backward on the CPU.)"""
    out = tmp_path / "decoder.json"
    args = ["benchmarks/bench_throughput.py", "--decoder", "tiny", "--seq-lens", "64", "--micro-batch", "4",
            "--steps", "1", "--warmup", "1", "--phases", "1", "--hf-variants", "docpos", "--engine",
            "zero1_bf16_lean", "--optimizer", "torch", "--sources", str(tmp_path / "sources"), "--out", str(out)]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "TORCHDYNAMO_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["python3", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {(r["side"], r["variant"]): r for r in json.loads(out.read_text())["results"]}
    assert set(rows) == {("hf", ""), ("xpt", ""), ("hf", "docpos")}
    for r in rows.values():
        assert r["engine"]["zero_stage"] == 1 and r["ds_config"]["zero_optimization"]["stage"] == 1
        assert (r["num_hidden_layers"], r["vocab_size"]) == (4, 1000)  # 2 source layers + 2 ITLs; the target's
        assert (r["n_params"], r["n_trainable"]) == (rows["xpt", ""]["n_params"], rows["xpt", ""]["n_trainable"])
    assert 0 < rows["xpt", ""]["n_trainable"] < rows["xpt", ""]["n_params"]  # phase 1: the new parameters only
    assert rows["xpt", ""]["documents_per_row"] > 1 and rows["xpt", ""]["final_loss"] > 0
    assert "decoder tiny (benchmarks/throughput_decoder.py), ds_configs/zero1_bf16_lean.json" in proc.stdout
    assert (tmp_path / "sources/decoder-tiny/config.json").is_file()  # written once, kept for the next run
    for variant in ("flex", "flex+compile"):
        refused = subprocess.run(["python3", "benchmarks/bench_throughput.py", "--variants", variant], cwd=REPO,
                                 env=env, capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and "are decoder rows (--decoder)" in refused.stderr
