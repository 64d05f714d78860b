"""The report of ``launch/compare_init_uagec.sh``, rebuilt from its output folder alone.

    python -m experiments.uagec.compare_init --out sweeps/init_uagec --steps 400 --batch 4

Reads, per run NAME: ``runs/NAME`` (its config, ``embedding_init.json``, ``metrics.jsonl``), ``eval/NAME.json``
(the test text), ``eval/NAME.unigram.json`` and ``eval/NAME.unigram_valid.json`` (the unigram predictor of the
run's own vocabulary on the same masked tokens), ``finetune/NAME/results.json`` and ``logs/NAME.seconds``.
Writes ``results.md``, ``summary.json`` and ``valid_curves.png`` (validation bits per character against step).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from xpt_ds.sweeps.curves import curve, curve_table, finetune_cell, finish_plot, read_json

RUNS = {  # name -> what it is, in the table's order
    "random": "XPT, `random` (002)",
    "source_mean": "XPT, `source_mean`",
    "frequency_rank": "XPT, `frequency_rank`",
    "overlap_copy": "XPT, `overlap_copy`",
    "focus": "XPT, `focus` (FOCUS)",
    "aligned": "XPT, `aligned` (WECHSEL)",
    "from_file": "XPT, `from_file` (Procrustes map)",
    "gogoulou_lang_en_en": "[lang→en][en] (003)",
    "gogoulou_lang_en_lang": "[lang→en][lang] (003)",
}
INIT_KINDS = ("copied", "combined", "fallback", "random", "zero")


def collect(out: Path) -> dict[str, dict]:
    rows = {}
    for name in RUNS:
        run = out / "runs" / name
        test = read_json(out / "eval" / f"{name}.json")
        if test is None:
            continue
        ft = read_json(out / "finetune" / name / "results.json")
        seconds = out / "logs" / f"{name}.seconds"
        rows[name] = {
            "test": test, "unigram": read_json(out / "eval" / f"{name}.unigram.json"),
            "unigram_valid": read_json(out / "eval" / f"{name}.unigram_valid.json"),
            "init": read_json(run / "embedding_init.json"), "curve": curve(run),
            "finetune": None if ft is None else {"summary": ft["summary"], "majority": ft.get("majority_baseline"),
                                                 "seeds": len(ft["seeds"])},
            "train_seconds": float(seconds.read_text().split()[-1]) if seconds.is_file() else None,
            "seed2": read_json(out / "eval" / f"{name}.seed2.json"),
        }
    return rows


def _init_cell(init: dict | None) -> str:
    if init is None:
        return "–"
    if init.get("strategy") == "kept":
        return f"all {init['rows']:,} kept"
    return ", ".join(f"{init[k]:,} {k}" for k in INIT_KINDS if init.get(k))


def table(rows: dict[str, dict]) -> str:
    best = min(r["test"]["bits_per_char"] for r in rows.values())
    head = ("| start | embedding rows | test bits/char | unigram bits/char | PPL / piece | unigram PPL | Hits@1 | "
            "MRR | MR | fine-tune acc | macro-F1 | train s |\n|" + "---|" * 12)
    lines = [head]
    for name, r in rows.items():
        t, u = r["test"], r["unigram"] or {}
        bpc = f"{t['bits_per_char']:.4f}"
        bpc = f"**{bpc}**" if t["bits_per_char"] == best else bpc
        lines.append(
            f"| {RUNS[name]} | {_init_cell(r['init'])} | {bpc} | {u.get('bits_per_char', math.nan):.4f} | "
            f"{t['ppl']:.2f} | {u.get('ppl', math.nan):.2f} | {100 * t['hits@1']:.2f} | {t['mrr']:.4f} | "
            f"{t['mr']:.1f} | {finetune_cell(r['finetune'], 'accuracy')} | "
            f"{finetune_cell(r['finetune'], 'macro_f1')} | "
            f"{'–' if r['train_seconds'] is None else round(r['train_seconds'])} |")
    return "\n".join(lines)


def replicate_table(rows: dict[str, dict]) -> str:
    """Test figures of the runs repeated with model.init_seed 2 beside the first seed's."""
    lines = ["| start | bits/char, seed 1234 | bits/char, seed 2 | PPL, seed 1234 | PPL, seed 2 | Hits@1, seed 1234 | "
             "Hits@1, seed 2 |", "|" + "---|" * 7]
    for name, r in rows.items():
        a, b = r["test"], r["seed2"]
        if b is not None:
            lines.append(f"| {RUNS[name]} | {a['bits_per_char']:.4f} | {b['bits_per_char']:.4f} | {a['ppl']:.2f} | "
                         f"{b['ppl']:.2f} | {100 * a['hits@1']:.2f} | {100 * b['hits@1']:.2f} |")
    return "\n".join(lines) if len(lines) > 2 else "(none yet)"


def plot(rows: dict[str, dict], path: Path) -> None:
    """Two panels, one per vocabulary (their bits per character share a scale but not a range): each run's
    validation curve and its vocabulary's unigram predictor on the same tokens."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [2, 1]})
    for ax, kept in zip(axes, (False, True)):
        names = [n for n, r in rows.items() if r["curve"] and (n == "gogoulou_lang_en_lang") == kept]
        for i, name in enumerate(names):
            steps, bpc = zip(*rows[name]["curve"])
            ax.plot(steps, bpc, marker="o", markersize=3, color=plt.cm.tab10(i), label=RUNS[name].replace("`", ""))
        unigram = next((rows[n]["unigram_valid"] for n in names if rows[n]["unigram_valid"]), None)
        if unigram:
            ax.axhline(unigram["bits_per_char"], color="grey", linestyle="--", label="unigram predictor")
        ax.set_title("source vocabulary (30,522 WordPiece)" if kept else "new 8,000-piece SentencePiece vocabulary")
    finish_plot(fig, axes, "optimizer step", "validation bits per character (masked pieces)", path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.uagec.compare_init", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the folder compare_init_uagec.sh filled")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps of every run")
    p.add_argument("--batch", type=int, required=True, help="sequences of 128 tokens per step")
    a = p.parse_args(argv)
    rows = collect(a.out)
    if not rows:
        raise SystemExit(f"error: {a.out}/eval holds no run's test figures")
    plot(rows, a.out / "valid_curves.png")
    curves = curve_table(rows, RUNS, "start", "bits_per_char")
    text = (f"# Embedding starts on UA-GEC ({a.steps} steps of {a.batch} × 128 tokens each)\n\n"
            f"## Test text\n\n{table(rows)}\n\n## Seed replicates (model.init_seed 2)\n\n{replicate_table(rows)}\n\n"
            f"## Validation bits per character by step\n\n{curves}\n\n![curves](valid_curves.png)\n")
    (a.out / "results.md").write_text(text)
    summary = {n: {k: v for k, v in r.items() if k != "curve"} | {"curve": r["curve"]} for n, r in rows.items()}
    (a.out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
