"""Frozen means frozen: xpt phase 1 on ZeRO-2 with 2 ranks through torchrun (``conftest.engine_runs``: the plain bf16
run is test_lean_engine's too)."""
import pytest
import torch
from transformers import AutoModelForMaskedLM

from xpt_ds.training.checkpoint import tag_for
from xpt_ds.model.objective import strip_prefix

pytestmark = pytest.mark.multiproc


@pytest.mark.parametrize("ds", ["zero2_fp32", "zero2_bf16"])
def test_phase1_leaves_source_untouched(ds, engine_runs, tiny_roberta):
    tag_dir = engine_runs(ds) / "checkpoints" / tag_for(4)  # the end of phase 1 (xpt preset: @new trains)
    states = torch.load(tag_dir / "mp_rank_00_model_states.pt", map_location="cpu", weights_only=False)
    module = strip_prefix(states["module"])  # what the engine held, in its compute dtype

    src = AutoModelForMaskedLM.from_pretrained(tiny_roberta).state_dict()
    reused = {f"roberta.encoder.layer.{i + 1}.{k[len(f'roberta.encoder.layer.{i}.'):]}": k
              for k in src for i in range(2) if k.startswith(f"roberta.encoder.layer.{i}.")}
    reused |= {k: k for k in src if k.startswith(("roberta.embeddings.position", "roberta.embeddings.token_type",
                                                  "roberta.embeddings.LayerNorm", "lm_head.dense", "lm_head.layer_norm"))}
    dtype = module["roberta.encoder.layer.1.attention.self.query.weight"].dtype
    assert dtype == (torch.bfloat16 if "bf16" in ds else torch.float32)
    for tgt, s in reused.items():
        assert torch.equal(module[tgt], src[s].to(dtype)), tgt
    frozen = torch.load(tag_dir / "frozen_fp32.pt", weights_only=True)
    assert {strip_prefix({k: 0}).popitem()[0] for k in frozen} == set(reused)
    assert all(torch.equal(strip_prefix(frozen)[t], src[s]) for t, s in reused.items())  # exact fp32, even under bf16
    assert not torch.equal(module["roberta.encoder.layer.0.attention.self.query.weight"].float(),
                           module["roberta.encoder.layer.1.attention.self.query.weight"].float())

    # Optimizer state exists only for trainable parameters: count it across both ranks' partitions.
    trainable = sum(shape.numel() for group in states["param_shapes"] for shape in group.values())
    frozen_count = sum(v.numel() for v in frozen.values())
    held = 0
    for rank in range(2):
        prefix = "bf16_" if "bf16" in ds else ""
        opt = torch.load(tag_dir / f"{prefix}zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", weights_only=False)
        osd = opt["optimizer_state_dict"]
        held += sum(t.numel() for t in osd["single_partition_of_fp32_groups"])
        exp_avg = sum(s["exp_avg"].numel() for s in osd["base_optimizer_state"]["state"].values())
        assert exp_avg == sum(t.numel() for t in osd["single_partition_of_fp32_groups"])
    padding = 2 * len(states["param_shapes"])  # ZeRO pads each group to a multiple of the world size
    assert trainable <= held <= trainable + padding
    assert set(states["frozen_param_shapes"]) == set(frozen)
    assert trainable + frozen_count == sum(p.numel() for p in AutoModelForMaskedLM.from_pretrained(tiny_roberta).parameters()) \
        + 2 * sum(v.numel() for k, v in src.items() if k.startswith("roberta.encoder.layer.0.")) \
        + (200 - 120) * (64 + 1)
