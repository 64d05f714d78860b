"""How much work a phase-1 step is of a phase-2 step, by count: the FLOPs of one training micro-batch (forward and
backward of ``CausalLMObjective``) of the XPT target of a decoder source, in each phase, counted by
``torch.utils.flop_counter.FlopCounterMode`` on the trainer's own model and trainable sets.

The target is built as ``benchmarks/bench_throughput.py --decoder SHAPE`` builds it (``xpt_ds.model.build``, the
phase's trainable names from ``xpt_ds.model.phases``: phase 1 the XPT preset, phase 2 ``@all``; frozen tensors do
not require gradients, so autograd computes no weight gradient for them). Attention runs as ``eager`` here, so its
score and value products are counted (as ``bmm``) for every query-key pair: the dense count of the MFU convention
(12·L·d·T a token). A kernel that skips masked blocks (flash, FlexAttention's document mask) does less, so two
ratios are reported: weight products only (``mm``/``addmm``: the linears, the head and its recompute under the
chunked cross-entropy) and weight + dense attention. The true work ratio of a causal, document-masked step lies
between them; elementwise work (norms, activations, rotary, softmax) is not counted by either.

    python benchmarks/phase_flops.py [--decoder 1b|135m|tiny] [--seq-len 512] [--sources DIR] [--out flops.json]

Attention's count per token grows with the row length and the weights' does not, so ``--extrapolate 2048`` also
reports the attention share at a longer row from the one counted (a row of 2048 at the 1B shape needs ~18 GB for
eager attention's saved scores; 512 fits this CPU).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from throughput_decoder import decoder_batches, decoder_tokenizer, write_decoder_source

WEIGHT_OPS = ("mm", "addmm")
ATTENTION_OPS = ("bmm", "baddbmm")


def count_step(model, objective, trainable: set[str], batch: dict) -> dict[str, int]:
    """FLOPs of one forward + backward of ``objective`` on ``batch`` with only ``trainable`` requiring gradients,
    by aten op name."""
    from torch.utils.flop_counter import FlopCounterMode

    for n, p in model.named_parameters():
        p.requires_grad_(n in trainable)
        p.grad = None  # the previous count's
    counter = FlopCounterMode(display=False)
    with counter:
        objective(**batch).backward()
    by_op: dict[str, int] = {}
    for op, flops in counter.get_flop_counts()["Global"].items():
        name = str(op).split(".")[1]
        by_op[name] = by_op.get(name, 0) + int(flops)
    return by_op


def build(shape: str, sources: Path, seq_len: int):
    """The XPT target of ``shape``, its objective on eager attention, and the trainable HF names per phase."""
    from xpt_ds.config import DataConfig, ModelConfig, PhaseConfig, TrainConfig
    from xpt_ds.model.build import build_model
    from xpt_ds.model.forward.objective import build_objective
    from xpt_ds.model.phases import build_phase_trainables

    source = write_decoder_source(sources / f"decoder_{shape}", shape)
    cfg = TrainConfig(model=ModelConfig(source=str(source), method="xpt"), data=DataConfig(seq_len=seq_len),
                      phases=[PhaseConfig(name="phase1", steps=1), PhaseConfig(name="phase2", steps=1)])
    tok = decoder_tokenizer(shape)
    built = build_model(cfg.model, tok)
    objective = build_objective(built.model)
    built.model.set_attn_implementation("eager")  # every query-key product a counted bmm
    return built.model, objective, build_phase_trainables(cfg, built.tags), tok


def summarize(by_phase: list[dict[str, int]], seq_len: int, extrapolate: int | None) -> dict:
    """Per-token counts of one row of ``seq_len`` tokens, and the phase-1 / phase-2 ratios."""
    tokens, rows = seq_len, []
    for i, by_op in enumerate(by_phase, start=1):
        weights = sum(by_op.get(o, 0) for o in WEIGHT_OPS)
        attention = sum(by_op.get(o, 0) for o in ATTENTION_OPS)
        rows.append({"phase": i, "by_op": by_op, "weights_per_token": weights / tokens,
                     "attention_per_token": attention / tokens})
    one, two = rows
    out = {"rows": rows, "seq_len": seq_len,
           "ratio_weights": one["weights_per_token"] / two["weights_per_token"],
           "ratio_weights_attention": (one["weights_per_token"] + one["attention_per_token"])
           / (two["weights_per_token"] + two["attention_per_token"])}
    if extrapolate:
        k = extrapolate / seq_len
        out["extrapolated"] = {"seq_len": extrapolate, "ratio_weights_attention":
                               (one["weights_per_token"] + k * one["attention_per_token"])
                               / (two["weights_per_token"] + k * two["attention_per_token"])}
    return out


def table(result: dict) -> str:
    lines = ["| phase | weight products, GFLOP a token | dense attention, GFLOP a token |", "|---|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['phase']} | {r['weights_per_token'] / 1e9:.3f} | {r['attention_per_token'] / 1e9:.3f} |")
    lines.append(f"\nphase 1 / phase 2: weights only {result['ratio_weights']:.3f}, weights + dense attention at "
                 f"{result['seq_len']} {result['ratio_weights_attention']:.3f}")
    if "extrapolated" in result:
        e = result["extrapolated"]
        lines.append(f"weights + dense attention at {e['seq_len']} (extrapolated): {e['ratio_weights_attention']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decoder", default="1b", choices=["1b", "135m", "tiny"])
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--extrapolate", type=int, default=None, help="also the attention share at this row length")
    ap.add_argument("--sources", type=Path, default=None, help="where the random-weight source is written (kept)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model, objective, trainables, tok = build(args.decoder, args.sources or Path(tmp), args.seq_len)
        batch = decoder_batches(tok, 1, args.seq_len, n=1)[0]
        by_phase = [count_step(model, objective, t, batch) for t in trainables]
    result = summarize(by_phase, args.seq_len, args.extrapolate)
    result["decoder"] = args.decoder
    print(table(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
