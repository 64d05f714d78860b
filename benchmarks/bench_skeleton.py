"""The model a resume, a phase switch and an export load into: ``build_skeleton(cfg, blank=True)`` (no random
init, NaN until loaded) against the same architecture built as ``transformers``' ``from_config`` builds it, with
its random init (what ``build_skeleton`` did before 2026-11-27, on every rank of every resume and phase switch).
Two shapes: the 14-layer hidden-768 50K-vocabulary encoder of the throughput benchmark and a 26-layer hidden-1024
Llama-shaped decoder. The variants alternate, so drift on a shared machine hits both; the table gives the fastest
and slowest of the repeats.

    python benchmarks/bench_skeleton.py [--repeats 3] [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import torch
from transformers import LlamaConfig, RobertaConfig

from xpt_ds.model.build import build_skeleton

SHAPES = {
    "encoder 14 x 768, 50K vocabulary": RobertaConfig(vocab_size=50000, num_hidden_layers=14, hidden_size=768,
                                                      intermediate_size=3072, num_attention_heads=12),
    "Llama 26 x 1024, 32K vocabulary": LlamaConfig(vocab_size=32000, num_hidden_layers=26, hidden_size=1024,
                                                   intermediate_size=4096, num_attention_heads=16,
                                                   num_key_value_heads=4),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{a.threads} threads, {a.repeats} repeats")
    print("| shape | parameters | random init (before) s | blank s | speed-up (slowest blank vs fastest init) |")
    print("|---|---:|---:|---:|---:|")
    for name, cfg in SHAPES.items():
        seconds: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(a.repeats):
            for blank in (False, True):
                start = time.perf_counter()
                model = build_skeleton(cfg, blank=blank)
                seconds[blank].append(time.perf_counter() - start)
        n = sum(p.numel() for p in model.parameters())
        init, blank = seconds[False], seconds[True]
        print(f"| {name} | {n / 1e6:.1f}M | {min(init):.2f}-{max(init):.2f} | {min(blank):.3f}-{max(blank):.3f} | "
              f"{min(init) / max(blank):.1f}x |")


if __name__ == "__main__":
    main()
