"""Run as one process (``test_trelm_export``, forked by ``run_main``: a world of one): under a ZeRO-3 engine that partitions every parameter, TreLM's
placeholder (``reorder``) and English decoder (``lm_logits(..., ENGLISH)``) read outside the engine's forward
give what the unpartitioned model gives. Exits 0 when they do."""
import copy
import os
import sys

import deepspeed
import torch

sys.path[:0] = [os.path.dirname(__file__), os.path.join(os.path.dirname(__file__), "trelm")]  # conftest, trelm_builders
from trelm_builders import trelm_skeleton  # noqa: E402
from xpt_ds.runtime.distributed import init_distributed  # noqa: E402
from xpt_ds.trelm.model import ENGLISH, encode, lm_logits  # noqa: E402
from xpt_ds.trelm.objective import TreLMObjective  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    init_distributed()  # as xpt_ds.cli.train does: unlinks DeepSpeed's CPU shared-memory buffer names
    model = trelm_skeleton("bert", layers=2)
    plain = copy.deepcopy(model)
    ds = {"train_micro_batch_size_per_gpu": 1,
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    engine, *_ = deepspeed.initialize(model=TreLMObjective(model), config=ds,
                                      optimizer=torch.optim.AdamW(model.parameters(), lr=0.0))
    hf = engine.module.hf
    assert hf.trelm.placeholder.numel() == 0, "the placeholder is not partitioned: nothing is tested"
    ids = torch.randint(5, 90, (2, 6))
    order = torch.tensor([[0, -1, 2, 3, -1, 5]] * 2)
    with torch.no_grad():
        for part in (plain, hf):
            part.eval()
        got = encode(hf, ids, order=order, output_mask=torch.ones(2, 6, dtype=torch.long))
        want = encode(plain, ids, order=order, output_mask=torch.ones(2, 6, dtype=torch.long))
        assert torch.allclose(got, want, atol=1e-5), "reorder"
        h = torch.randn(3, 64)
        assert torch.allclose(lm_logits(hf, h, ENGLISH), lm_logits(plain, h, ENGLISH), atol=1e-5), "English"
    deepspeed.comm.destroy_process_group()
    return 0


if __name__ == "__main__":
    from xpt_ds.runtime.process_exit import exit_process
    exit_process(main())  # as xpt-ds's commands end (a 2-rank ZeRO-3 script's teardown once aborted)
