"""The engine settings xpt-ds refuses (``xpt_ds.config.engine_support``): each one found to train otherwise, lose a
resume's exactness or stop in DeepSpeed with a traceback, on 2 CPU ranks (docs/cluster.md, "DeepSpeed settings
xpt-ds refuses"); the shipped configs and the settings that only move memory or communication pass. The wiring
into the trainer's start is tests/cli/test_bad_input.py's ``ds_json_round_robin_gradients``."""
import json

import pytest

from conftest import REPO
from xpt_ds.config.engine_support import unsupported

Z2, Z3 = {"stage": 2}, {"stage": 3}
BF16 = {"enabled": True}
REFUSED = [
    ({"zero_optimization": {**Z2, "round_robin_gradients": True}}, "zero_optimization.round_robin_gradients"),
    ({"zero_optimization": {**Z3, "zero_hpz_partition_size": 2}}, "zero_optimization.zero_hpz_partition_size is 2"),
    ({"zero_optimization": {**Z2, "load_from_fp32_weights": False}, "bf16": BF16},
     "load_from_fp32_weights is false; a resume would take the fp32 masters from the bf16 weights"),
    ({"zero_optimization": {"stage": 1, "elastic_checkpoint": True}}, "zero_optimization.elastic_checkpoint"),
    ({"zero_optimization": Z2, "gradient_predivide_factor": 2.0}, "gradient_predivide_factor is 2.0 with "
                                                                  "zero_optimization.reduce_scatter"),
    ({"zero_optimization": Z3, "prescale_gradients": True}, "prescale_gradients is true"),
    ({"zero_optimization": Z2, "checkpoint": {"load_universal": False}}, "checkpoint.load_universal is set"),
    ({"zero_optimization": Z2, "checkpoint": {"writer": {"decoupled": True}}}, "checkpoint.writer is set"),
    ({"zero_optimization": Z2, "tensor_parallel": {"autotp_size": 2}}, "tensor_parallel.autotp_size"),
    ({"zero_optimization": Z2, "sequence_parallel_size": 2}, "sequence_parallel_size"),
    ({"zero_optimization": {**Z3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}},
     "offload_optimizer.ratio is 0.5; a partial offload steps with DeepSpeed's CPU Adam"),
    ({"zero_optimization": {**Z3, "offload_optimizer": {"device": "cpu", "super_offload": True}}},
     "SuperOffload runs on NVIDIA CUDA GPUs only, and this machine's accelerator is cpu"),
    ({"zero_optimization": {**Z3, "zero_quantized_weights": True, "zero_quantized_gradients": True}},
     "zero_optimization.zero_quantized_weights, zero_optimization.zero_quantized_gradients: ZeRO++'s quantised"),
]
ACCEPTED = [  # each trained as the plain engine did, and resumed either way bit for bit or within float noise
    {"zero_optimization": {**Z2, "load_from_fp32_weights": False}},  # fp32: the module is the fp32 master
    {"zero_optimization": {**Z2, "gradient_predivide_factor": 2.0, "reduce_scatter": False}},
    {"zero_optimization": {**Z2, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": 1000,
                           "overlap_comm": True, "contiguous_gradients": False}},
    {"zero_optimization": {**Z3, "zero_hpz_partition_size": 1, "offload_param": {"device": "cpu"},
                           "stage3_param_persistence_threshold": 0}},
]


@pytest.mark.parametrize("ds,needle", REFUSED, ids=[n.split()[0].rstrip(";:,") for _, n in REFUSED])
def test_a_setting_that_breaks_training_or_resume_is_one_reason(ds, needle):
    why = unsupported(ds, torch_adam=True, device="cpu")
    assert why is not None and needle in why, why
    assert "\n" not in why


@pytest.mark.parametrize("ds", ACCEPTED)
def test_settings_that_only_move_memory_or_communication_pass(ds):
    assert unsupported(ds, torch_adam=True, device="cpu") is None


def test_the_shipped_configs_pass_and_gpu_only_settings_pass_on_a_gpu():
    for path in sorted((REPO / "ds_configs").glob("*.json")):
        assert unsupported(json.loads(path.read_text()), torch_adam=False, device="cuda") is None, path
    gpu = {"zero_optimization": {**Z3, "zero_quantized_weights": True,
                                 "offload_optimizer": {"device": "cpu", "super_offload": True, "ratio": 0.5}}}
    assert unsupported(gpu, torch_adam=False, device="cuda") is None
