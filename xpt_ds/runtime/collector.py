"""Python's cyclic garbage collector while a rank starts.

A rank's start imports torch, DeepSpeed and transformers' modeling modules: about 700,000 objects the collector
tracks (modules, classes, functions, their dicts), nearly none of which will ever be garbage. Left alone, the
collector walks them over and over: during the imports, since its passes are triggered by allocation counts, and
in every full pass of the run after. So the imports run with the collector off and end in ``gc.freeze()``,
which moves everything alive into a generation no pass walks; the model, engine and loaders are then built with
it off as well, and it is on again before the first step. The README demo's run cut to one step per phase takes 0.87x
the CPU time and 0.97x the peak memory of the same run with the collector as Python has it
(``benchmarks/bench_startup.py``, BENCHMARKS.md). A DataLoader worker forked later runs no pass over the frozen
objects either; a pass writes to every object it walks, which would copy that memory page from the rank's (the
use ``gc.freeze``'s documentation gives).

What the freeze costs: the cyclic garbage the imports leave (about 13,500 small objects, 2 % of what they make)
is never collected; a collection first would cost a full pass (0.59 s on the 2-core CI machine). Only the
imports are frozen, because a frozen cycle is never freed and the build makes objects that die later: frozen
with the build, the engine a phase switch drops stayed alive through a full pass, with its parameters and
optimizer state (on a GPU, their device memory). ``tests/runtime/test_collector.py`` checks that it is freed.
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
