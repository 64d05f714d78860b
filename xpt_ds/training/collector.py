"""Python's cyclic garbage collector while a rank starts.

A rank's start imports torch, DeepSpeed and transformers' modeling modules: about 700,000 objects the collector
tracks (modules, classes, functions, their dicts), none of which will ever be garbage. Left alone, the collector
walks them over and over: during the imports, since its passes are triggered by allocation counts, and in every
full pass of the run after. So the imports run with the collector off and end in ``gc.freeze()``, which moves
everything alive into a generation no pass walks; the model, engine and loaders are then built with it off as
well, and it is on again before the first step. The README demo's run cut to one step per phase takes 0.87x
the CPU time and 0.97x the peak memory of the same run with the collector as Python has it
(``benchmarks/bench_startup.py``, BENCHMARKS.md), and a DataLoader worker forked later never writes the frozen
objects' headers, so their memory pages stay shared with the rank (the use ``gc.freeze``'s documentation gives).

What the freeze costs: the cyclic garbage the imports leave (about 13,500 small objects, 2 % of what they make)
is never collected; a collection first would cost a full pass (0.6 s on the CI machine). Only the imports are
frozen: the build makes objects that die later in cycles (the source model whose weights are copied, the engine
a phase switch drops, with the device memory it holds), and the collector must still reach those.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def importing() -> Iterator[None]:
    """The collector off inside the block; at its end (an error included) everything alive is frozen, and the
    collector is on again if it was. For imports only: nothing made inside may need collecting later."""
    with paused():
        try:
            yield
        finally:
            gc.freeze()


@contextmanager
def paused() -> Iterator[None]:
    """The collector off inside the block, and as it was once the block ends (an error included)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
