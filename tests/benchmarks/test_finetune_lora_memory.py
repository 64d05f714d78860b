"""benchmarks/finetune_lora_memory.py keeps working on a tiny Llama (no measurement): each variant builds, trains
and reports; the two autocast variants give the same losses, which is the claim its table rests on."""
import sys

from conftest import REPO


def test_every_variant_runs_and_the_autocast_ones_agree(tiny_decoder, one_thread):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import finetune_lora_memory as bench

    source = tiny_decoder("llama", False, 0.0)
    got = {v: bench.measure(str(source), v, "cpu", rank=4, rows=2, length=16, steps=2) for v in bench.VARIANTS}
    assert all(len(r["losses"]) == 2 and len(r["step_s"]) == 2 and r["peak_in_steps_gb"] > 0 for r in got.values())
    assert got["autocast_fp32_bases"]["losses"] == got["autocast_bf16_bases"]["losses"]
    assert got["fp32"]["losses"] != got["autocast_bf16_bases"]["losses"]
    trained = {r["trainable"] for r in got.values()}
    assert len(trained) == 1, got  # the same LoRA targets and head on both sides
