"""benchmarks/phase_flops.py counts what each phase's step computes: on the tiny decoder target, its counts equal
the ones worked out from the model's shapes and the phase's trainable set (forward 2, input gradients 2, weight
gradients 2 FLOPs per weight and token; the head once more for the chunked cross-entropy's recompute)."""
import json
import subprocess
import sys

import torch

from conftest import REPO


def test_counts_equal_the_shapes_sums_and_phase1_skips_the_frozen_weight_gradients(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import phase_flops

    T = 64
    model, objective, trainables, tok = phase_flops.build("tiny", tmp_path, T)
    batch = phase_flops.decoder_batches(tok, 1, T, n=1)[0]
    M = batch["mlm_targets"].numel()  # the head runs on the predicting positions only
    head = model.get_output_embeddings().weight
    V, d = head.shape
    linears = {f"{n}.weight": m.weight.numel() for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and m.weight is not head}
    assert linears and len(trainables) == 2
    for phase, trainable in enumerate(trainables, start=1):
        by_op = phase_flops.count_step(model, objective, trainable, batch)
        trained = sum(n for name, n in linears.items() if name in trainable)
        if phase == 2:
            assert trained == sum(linears.values())
        else:
            assert 0 < trained < sum(linears.values())  # the ITLs' linears, not the source's
        weight_grads = 2 * trained * T
        assert by_op["mm"] + by_op.get("addmm", 0) == 4 * sum(linears.values()) * T + weight_grads + 8 * d * V * M
        assert by_op["bmm"] > 0  # eager attention's products


def test_the_command_reports_both_phases_and_the_ratios(tmp_path):
    out = tmp_path / "flops.json"
    proc = subprocess.run([sys.executable, "benchmarks/phase_flops.py", "--decoder", "tiny", "--seq-len", "64",
                           "--extrapolate", "256", "--sources", str(tmp_path), "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    one, two = result["rows"]
    assert one["attention_per_token"] == two["attention_per_token"]  # attention has no weights: same in both
    assert 0 < result["ratio_weights"] < result["ratio_weights_attention"] < \
        result["extrapolated"]["ratio_weights_attention"] < 1
    assert f"weights only {result['ratio_weights']:.3f}" in proc.stdout
