"""Run under torchrun (tests/training/test_frozen.py): FrozenWeights on every rank of a gloo group holds a 1/world
slice of each value it must copy and gives the whole back, exactly, from ``full`` (every rank, the same order); a value the
engine's own bf16 copy holds exactly is kept as that copy, not copied. Writes OUT/rank{R}.json."""
import json
import sys
from pathlib import Path

import torch

from xpt_ds.checkpoint.frozen import FrozenWeights

torch.distributed.init_process_group("gloo")
rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
gen = torch.Generator().manual_seed(0)  # the same values on every rank
shapes = {"a.weight": (7, 5), "b.bias": (3,), "c.one": (1,), "d.weight": (4, 4, 2)}
values = {name: torch.randn(shape, generator=gen) for name, shape in shapes.items()}
frozen = FrozenWeights()
for name, value in values.items():
    frozen.keep_slice(name, value)
# the engine's bf16 copies: one that holds its fp32 value exactly (a bf16 source's weight), one that rounds it
values["e.exact"] = torch.randn(6, 2, generator=gen).bfloat16().float()
values["f.rounded"] = torch.randn(6, 2, generator=gen)
for name in ("e.exact", "f.rounded"):
    frozen.keep(name, values[name], torch.nn.Parameter(values[name].bfloat16(), requires_grad=False))
# ZeRO-3 parameters (each rank holds a partition): bf16 partitions that hold the value exactly; that hold it on every
# rank but the last (every rank must keep it as a slice all the same: partitions and slices gather differently); fp32
size = -(-13 // world)
values["g.partitioned"] = torch.randn(13, generator=gen).bfloat16().float()
values["h.last_rank_rounds"] = values["g.partitioned"].clone()
values["h.last_rank_rounds"][-1] += 1e-6  # no bf16 number: in the last rank's partition only
values["i.fp32"] = torch.randn(13, generator=gen)
for name, dtype in (("g.partitioned", torch.bfloat16), ("h.last_rank_rounds", torch.bfloat16),
                    ("i.fp32", torch.float32)):
    piece = values[name][rank * size:(rank + 1) * size]
    param = torch.nn.Parameter(torch.empty(0, dtype=dtype), requires_grad=False)
    param.ds_tensor = torch.zeros(size, dtype=dtype)
    param.ds_tensor[:piece.numel()] = piece.to(dtype)  # what xpt_ds.training.fill.write_module puts there
    param.ds_process_group = None  # every rank
    frozen.keep(name, values[name], param)
full = {name: frozen.full(name) for name in frozen.names()}
row = {"rank": rank, "world": world, "held": {n: frozen.entries[n][1].numel() for n in shapes},
       "kinds": {n: frozen.entries[n][0] for n in values}, "copied": frozen.numel(),
       "exact": all(torch.equal(full[n], values[n]) for n in values),
       "shapes": {n: list(full[n].shape) for n in shapes}}
Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps(row))
torch.distributed.destroy_process_group()
from xpt_ds.runtime.process_exit import exit_process  # noqa: E402 (as xpt-ds's commands end)

exit_process(0)
