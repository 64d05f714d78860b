"""``xpt_ds.train``'s own ``main``, with a probe around the phase switch: is the engine it drops collectable?
Writes ``dropped engine collected: True|False`` for each switch to the file named by ``PROBE_OUT``
(tests/test_collector.py runs it in a forked child, ``processes.run_main``)."""
import gc
import os
import weakref

from xpt_ds import train
from xpt_ds.training.trainer import Trainer


def main(argv: list[str]) -> int:
    switch = Trainer.maybe_switch_phase

    def probed(self) -> bool:
        dropped = weakref.ref(self.engine)
        switched = switch(self)  # False at the end of the last phase: nothing dropped
        gc.collect()  # a full pass: only frozen objects (gc.freeze) survive it unreferenced
        if switched:
            with open(os.environ["PROBE_OUT"], "a") as out:
                out.write(f"dropped engine collected: {dropped() is None}\n")
        return switched

    Trainer.maybe_switch_phase = probed
    return train.main(argv)
