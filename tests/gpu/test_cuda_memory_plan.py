"""The memory plan on one GPU (xpt_ds.training.memory_plan): a rank's capacity is its card's memory, named in the
start-up line, and a phase bigger than the card is refused naming it; the host's share is what offloaded states
are checked against. Skipped without CUDA (tests/training/test_memory_plan.py is the CPU's)."""
from __future__ import annotations

import re

import pytest
import torch

from xpt_ds.training.memory_plan import GIB, capacity, memory_problem, node_memory, phase_states, plan_line

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

BF16_ZERO1 = {"zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}


def test_a_rank_s_capacity_is_its_card_and_a_phase_bigger_than_it_is_refused():
    device = torch.device("cuda", torch.cuda.current_device())
    cap = capacity(device, ranks_on_node=1)
    props = torch.cuda.get_device_properties(device)
    assert cap.device == props.total_memory and not cap.on_host and cap.host == node_memory()
    assert cap.device_where == f"{props.name} ({device}) has {props.total_memory / GIB:.1f} GiB"
    params = int(cap.device / 4)  # ZeRO-1 bf16 on one rank: 16 bytes a trained parameter, 4x the card
    fits = phase_states("phase1", params, params // 100, BF16_ZERO1, 1)
    assert fits.device < cap.device
    assert plan_line([fits], BF16_ZERO1, 1, cap).endswith(f"; {cap.device_where}")
    assert memory_problem([fits], BF16_ZERO1, 1, cap) is None
    whole = phase_states("phase2", params, params, BF16_ZERO1, 1)
    assert re.match(rf"phase 'phase2' needs at least [\d.]+ GiB a rank on its accelerator .* and {props.name} "
                    rf"\({re.escape(str(device))}\) has ", memory_problem([fits, whole], BF16_ZERO1, 1, cap))
