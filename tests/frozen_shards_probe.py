"""Run under torchrun (tests/test_frozen.py): FrozenWeights on every rank of a gloo group holds a 1/world slice of
each value and gives the whole back, exactly, from ``full`` (every rank, the same order); writes OUT/rank{R}.json."""
import json
import sys
from pathlib import Path

import torch

from xpt_ds.training.frozen import FrozenWeights

torch.distributed.init_process_group("gloo")
rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
gen = torch.Generator().manual_seed(0)  # the same values on every rank
shapes = {"a.weight": (7, 5), "b.bias": (3,), "c.one": (1,), "d.weight": (4, 4, 2)}
values = {name: torch.randn(shape, generator=gen) for name, shape in shapes.items()}
frozen = FrozenWeights(values)
full = {name: frozen.full(name) for name in frozen.names()}
row = {"rank": rank, "world": world, "held": {n: frozen.slices[n].numel() for n in shapes},
       "exact": all(torch.equal(full[n], values[n]) for n in shapes), "shapes": {n: list(full[n].shape) for n in shapes}}
Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps(row))
torch.distributed.destroy_process_group()
