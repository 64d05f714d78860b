"""The report of ``launch/compare_trelm_uagec.sh``, rebuilt from its output folder alone.

    python -m experiments.uagec.compare_trelm --out sweeps/trelm_uagec --grid-steps 100

Reads, per run NAME: ``runs/NAME`` (config, ``metrics.jsonl``), ``eval/NAME.json`` (UA-GEC's test text),
``eval/NAME.unigram.json`` (the 8,000-piece vocabulary's unigram predictor on the same masked tokens),
``finetune/NAME/results.json`` and ``logs/NAME.seconds``. Writes ``results.md``, ``summary.json`` and
``valid_curves.png`` (validation bits per word against step).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from xpt_ds.sweeps.curves import curve, curve_table, finetune_cell, finish_plot, read_json

FULL = {  # name -> what it is, in the table's order
    "scratch": "Scratch (002)",
    "xpt": "XPT, `source_mean` (002)",
    "trelm": "TreLM (004): common → en→X ‖ X→en → merge → language-specific",
    "trelm_no_cdlm": "TreLM w/o CdLM (branches: English MLM)",
    "trelm_no_cdlm_no_tri": "TreLM w/o CdLM & w/o TRILayer",
}
GRID = {
    "common_random": "Rand",
    "common_fasttext": "fastText PT",
    "common_fasttext_adversarial": "fastText PT + Adv Align",
    "common_source_mean": "`source_mean` (not in 004)",
}


def rows_by_step(run: Path) -> list[int]:
    """Rows of 128 tokens forwarded in training up to each global step (index = step): per step, micro-batch ×
    grad_accum rows for each row group its phase's objectives read (target MLM; English MLM; CdLM pairs, one
    direction per phase). Both TreLM branches count: their steps follow each other."""
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    accum = cfg["optim"]["grad_accum"]
    micro = cfg["optim"]["micro_batch_size"] * accum
    pairs = (cfg["data"]["parallel_micro_batch"] or cfg["optim"]["micro_batch_size"]) * accum
    total = [0]
    for ph in cfg["phases"]:
        objectives = ph.get("objectives") or ["mlm_target"]
        per_step = micro * (1 + ("mlm_source" in objectives)) + pairs * sum(o.startswith("cdlm") for o in objectives)
        total += [total[-1] + per_step * (i + 1) for i in range(ph["steps"])]
    return total


def collect(out: Path, names: dict[str, str]) -> dict[str, dict]:
    rows = {}
    for name in names:
        run, test = out / "runs" / name, read_json(out / "eval" / f"{name}.json")
        if test is None:
            continue
        ft = read_json(out / "finetune" / name / "results.json")
        seconds = out / "logs" / f"{name}.seconds"
        rows[name] = {
            "test": test, "unigram": read_json(out / "eval" / f"{name}.unigram.json"), "rows": rows_by_step(run)[-1],
            "curve": curve(run, "valid/bits_per_word"), "rows_by_step": rows_by_step(run),
            "finetune": None if ft is None else {"summary": ft["summary"], "majority": ft.get("majority_baseline"),
                                                 "seeds": len(ft["seeds"])},
            "train_seconds": float(seconds.read_text().split()[-1]) if seconds.is_file() else None,
        }
    return rows


def table(rows: dict[str, dict], names: dict[str, str], finetune: bool) -> str:
    best = min(r["test"]["bits_per_word"] for r in rows.values())
    cols = ["run", "rows × 128", "test bits/word", "bits/char", "PPL / piece", "Hits@1", "MRR"]
    cols += ["fine-tune acc", "macro-F1"] if finetune else []
    lines = ["| " + " | ".join(cols + ["train s"]) + " |", "|" + "---|" * (len(cols) + 1)]
    for name, r in rows.items():
        t = r["test"]
        bpw = f"{t['bits_per_word']:.3f}"
        cells = [names[name], f"{r['rows']:,}", f"**{bpw}**" if t["bits_per_word"] == best else bpw,
                 f"{t['bits_per_char']:.4f}", f"{t['ppl']:.1f}", f"{100 * t['hits@1']:.2f}", f"{t['mrr']:.4f}"]
        if finetune:
            cells += [finetune_cell(r["finetune"], "accuracy"), finetune_cell(r["finetune"], "macro_f1")]
        cells.append("–" if r["train_seconds"] is None else str(round(r["train_seconds"])))
        lines.append("| " + " | ".join(cells) + " |")
    uni = next((r["unigram"] for r in rows.values() if r["unigram"]), None)
    if uni:
        lines.append(f"| unigram predictor of the vocabulary | – | {uni['bits_per_word']:.3f} | "
                     f"{uni['bits_per_char']:.4f} | {uni['ppl']:.1f} | {100 * uni['hits@1']:.2f} | {uni['mrr']:.4f} |"
                     + (" – | – |" if finetune else "") + " – |")
    return "\n".join(lines)


def plot(full: dict[str, dict], grid: dict[str, dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, rows, names, title in ((axes[0], full, FULL, "equal compute: 1,600 rows of 128 tokens"),
                                   (axes[1], grid, GRID, "004 Table 5: the commonality phase alone")):
        for i, (name, r) in enumerate(rows.items()):
            if r["curve"]:
                steps, bpw = zip(*r["curve"])
                ax.plot([r["rows_by_step"][s] for s in steps], bpw, marker="o", markersize=3,
                        color=plt.cm.tab10(i), label=names[name].replace("`", ""))
        ax.set_title(title)
    finish_plot(fig, axes, "rows of 128 tokens trained on (compute; TreLM: both branches counted)",
                "validation bits per word (masked pieces)", path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.uagec.compare_trelm", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the folder compare_trelm_uagec.sh filled")
    p.add_argument("--grid-steps", type=int, required=True, help="steps of the commonality-only runs")
    a = p.parse_args(argv)
    full, grid = collect(a.out, FULL), collect(a.out, GRID)
    if not full and not grid:
        raise SystemExit(f"error: {a.out}/eval holds no run's test figures")
    plot(full, grid, a.out / "valid_curves.png")
    text = (f"# TreLM, XPT and Scratch on UA-GEC at equal compute\n\n## Test text\n\n{table(full, FULL, True)}\n\n"
            f"## 004 Table 5: word-embedding starts, commonality phase alone ({a.grid_steps} steps)\n\n"
            f"{table(grid, GRID, False)}\n\n## Validation bits per word by step\n\n{curve_table(full, FULL, 'run')}\n\n"
            f"{curve_table(grid, GRID, 'run')}\n\n![curves](valid_curves.png)\n")
    (a.out / "results.md").write_text(text)
    summary = {n: {k: v for k, v in r.items() if k != "rows_by_step"} for n, r in {**full, **grid}.items()}
    (a.out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
