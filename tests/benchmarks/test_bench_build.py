"""benchmarks/bench_build.py keeps working: its whole sequence (a source written in the hub's layout, the
two-phase run stopped after the hand-over, the resume, the export, the peer's from_pretrained) on a tiny shape,
one rank. CPU numbers of a tiny model are no measurement; this checks the rows are complete."""
import json
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.multiproc


def test_bench_build_runs_through_on_a_tiny_shape(tmp_path, corpus):
    proc = subprocess.run([sys.executable, "benchmarks/bench_build.py", "--out", str(tmp_path), "--shapes", "tiny",
                           "--worlds", "1", "--data", str(corpus), "--label", "tiny"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "tiny.json").read_text())
    (row,), (hf,) = result["rows"], result["hf"]
    assert hf["rc"] == 0 and hf["peak"]["job_anon_gib"] > 0
    assert row["killed"] is None and 0 < row["ready_s"] < row["first_step_s"]
    assert row["to_first_step"]["ranks"]["0"]["anon_gib"] > 0
    assert row["handover_s"] > 0 and "ranks" in row["handover"]  # a tiny hand-over may fall between two samples
    assert row["resume"]["to_resumed_s"] > 0 and row["export"]["rc"] == 0
    assert "model.safetensors" in row["export"]["files"]
    assert "| tiny | 1 |" in proc.stdout
