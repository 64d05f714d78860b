"""``xpt_ds.cli.train``'s own ``main``, with a probe around the phase switch: is the engine it drops collectable, and is
its optimizer's state (fp32 masters or partitions, Adam moments) freed? Writes ``dropped engine collected:
True|False; its optimizer state freed: True|False`` for each switch to the file named by ``PROBE_OUT`` (with
``.rank{R}`` under a launcher) (tests/runtime/test_collector.py runs it in a forked child, ``processes.run_main``, and
under torchrun)."""
import gc
import os
import sys
import weakref

import torch

from xpt_ds.cli import train
from xpt_ds.training.trainer import Trainer


def _state_tensors(optimizer) -> list[torch.Tensor]:
    """Every tensor the optimizer (DeepSpeed's and the torch one inside it) holds in its attributes and state."""
    found, todo = [], [vars(optimizer)]
    base = getattr(optimizer, "optimizer", None)
    if base is not None:
        todo.append(base.state)
    seen = set()
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor) and not isinstance(obj, torch.nn.Parameter):
            found.append(obj)
        elif isinstance(obj, dict):
            todo += list(obj.values())
        elif isinstance(obj, (list, tuple)):
            todo += list(obj)
    return [t for t in found if t.numel() > 0]


def main(argv: list[str]) -> int:
    switch = Trainer.maybe_switch_phase
    out_path = os.environ["PROBE_OUT"] + (f".rank{os.environ['RANK']}" if "LOCAL_RANK" in os.environ else "")

    def probed(self) -> bool:
        dropped = weakref.ref(self.engine)
        state = [weakref.ref(t) for t in _state_tensors(self.engine.optimizer)]
        switched = switch(self)  # False at the end of the last phase: nothing dropped
        gc.collect()  # a full pass: only frozen objects (gc.freeze) survive it unreferenced
        if switched:
            with open(out_path, "a") as out:
                out.write(f"dropped engine collected: {dropped() is None}; its optimizer state freed: "
                          f"{bool(state) and all(t() is None for t in state)}\n")
        return switched

    Trainer.maybe_switch_phase = probed
    return train.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
