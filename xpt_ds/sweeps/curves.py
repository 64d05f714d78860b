"""What reports that compare runs share: reading a run's files, validation curves as a table and a plot,
fine-tuning cells (the studies' reports in ``experiments/`` are built from these)."""
from __future__ import annotations

import json
from pathlib import Path


def read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def curve(run: Path, key: str = "valid/bits_per_char") -> list[tuple[int, float]]:
    """(step, ``key``) from the run's metrics.jsonl."""
    points = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if key in row:
            points.append((row["step"], row[key]))
    return points


def finetune_cell(ft: dict | None, key: str) -> str:
    if ft is None or key not in ft["summary"]:
        return "–"
    s = ft["summary"][key]
    return f"{100 * s['mean']:.2f}" + (f" ± {100 * s['std']:.2f}" if s["n"] > 1 else "")


def curve_table(rows: dict[str, dict], names: dict[str, str], head: str, unigram_key: str | None = None) -> str:
    """Each run's validation curve as a row (``names``: run -> label, ``head``: the first column's title); with
    ``unigram_key``, a last column of that figure of the run's unigram predictor on the same tokens."""
    steps = sorted({s for r in rows.values() for s, _ in r["curve"]})
    lines = [f"| {head} | " + " | ".join(str(s) for s in steps) + (" | unigram |" if unigram_key else " |"),
             "|" + "---|" * (len(steps) + 1 + bool(unigram_key))]
    for name, r in rows.items():
        at = dict(r["curve"])
        cells = [f"{at[s]:.3f}" if s in at else "–" for s in steps]
        if unigram_key:
            uni = r["unigram_valid"]
            cells.append(f"{uni[unigram_key]:.3f}" if uni else "–")
        lines.append(f"| {names[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def finish_plot(fig, axes, xlabel: str, ylabel: str, path: Path) -> None:
    """Label, grid and legend every panel, then write ``path`` and free the figure."""
    import matplotlib.pyplot as plt
    for ax in axes:
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
