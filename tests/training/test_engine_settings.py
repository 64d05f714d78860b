"""The engine a run builds from its DeepSpeed JSON: DeepSpeed's own checks of the JSON before anything is built, and
the gradient norm logged at every ZeRO stage."""
import pytest

from conftest import REPO, base_config, launch, read_metrics, write_config


def _run(tmp_path, name: str, source, corpus, deepspeed: str):
    cfg = base_config(tmp_path / name, source, corpus, deepspeed=deepspeed,
                      phases=[{"name": "p1", "steps": 3, "lr": 1e-3}])
    cfg["optim"]["grad_clip"] = 0.5
    cfg["data"]["valid_shards"] = []
    return launch(["--config", str(write_config(tmp_path / f"{name}.yaml", cfg))])


def test_a_misspelt_top_level_key_of_the_deepspeed_json_stops_the_run_before_it_starts(tmp_path, tiny_roberta,
                                                                                       corpus):
    """DeepSpeed ignores a top-level key it does not read: ``zero_optimisation`` trained at ZeRO stage 0."""
    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimisation": {"stage": 2}, "bf16": {"enabled": false}}')
    proc = _run(tmp_path, "run", tiny_roberta, corpus, str(ds))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "top-level key 'zero_optimisation' is no DeepSpeed setting (it would be ignored); did you mean "
        "'zero_optimization'?")
    assert not (tmp_path / "run/checkpoints").exists() or not any((tmp_path / "run/checkpoints").iterdir())


def test_grad_norm_is_logged_at_zero_stage_0(tmp_path, tiny_roberta, corpus):
    """DeepSpeed 0.19.8 computes the norm at stage 0 only to clip and keeps none (get_global_grad_norm is None),
    so train/grad_norm was never logged with ds_configs/zero0_fp32.json. The trainer's is the same quantity as
    ZeRO-1's (the gradients' norm before clipping: above optim.grad_clip), and reading it changes no update."""
    norms, losses = {}, {}
    for stage in (0, 1):
        proc = _run(tmp_path, f"zero{stage}", tiny_roberta, corpus, str(REPO / f"ds_configs/zero{stage}_fp32.json"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "validation: none (data.valid_shards is empty)" in proc.stderr  # eval_every and eval_batches do nothing
        metrics = read_metrics(tmp_path / f"zero{stage}")
        norms[stage] = [metrics[step]["train/grad_norm"] for step in (1, 2, 3)]
        losses[stage] = [metrics[step]["train/loss"] for step in (1, 2, 3)]
    assert all(n is not None and n > 0.5 for n in norms[0]), norms
    assert norms[0] == pytest.approx(norms[1], rel=1e-5)
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
