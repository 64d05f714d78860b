"""The sweep's report, rebuilt from ``results.jsonl`` alone (and the references beside it, ``unigram.json`` and
``source_text.json``): ``results.md`` (002 Table 2 per data size, the downstream and raw-text columns, the
data-efficiency ratio), ``plot_<metric>.png`` (metric against data size, log-x, one line per method, as 002
Figures 3 and 4), TensorBoard scalars under ``tb/`` and ``summary.json``.

The data-efficiency ratio answers 002 §5.1's question, "how much data does Scratch need to match XPT?": for
each method M and size s, the Scratch size s' whose metric equals M's at s, by linear interpolation of the
metric in log2(size) on Scratch's curve, and s'/s.
"""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from xpt_ds.config.methods import BASELINE
from xpt_ds.errors import ArgumentParser, UserError, cli_errors
from xpt_ds.io.paths import write_text_atomic
from xpt_ds.sweeps.arms import baseline_arm, color, display_name, ordered
from xpt_ds.sweeps.rows import PROBE_SUFFIX, read_json, read_rows
from xpt_ds.sweeps.seeds import aggregate, spread

# 002 Table 2's columns: (key in the evaluate JSON, header, higher is better, shown ×100).
INTRINSIC = (("ppl", "PPL", False, False), ("hits@1", "Hits@1", True, True), ("hits@3", "Hits@3", True, True),
             ("hits@5", "Hits@5", True, True), ("hits@10", "Hits@10", True, True), ("mrr", "MRR", True, False),
             ("mr", "MR", False, False))
DOWNSTREAM = "downstream_mean"  # the row key of the fine-tuned headline metric's mean (higher is better)
# --score-text's columns per label: (key in a row's text[label], header after the label, decimals, lower is better;
# None: no best, as pieces per word is the tokenizer's, not the model's).
TEXT_COLUMNS = (("bits_per_byte", "bits per byte", 4, True), ("pieces_per_word", "pieces per word", 2, None))


def parse_size(text: str) -> int:
    """``100K`` -> 100000, ``1.6M`` -> 1600000, ``2G``, or a plain integer (decimal multiples, as 002)."""
    t = text.strip().upper().replace("_", "")
    scale = {"K": 10**3, "M": 10**6, "G": 10**9}.get(t[-1:], 1)
    try:
        n = round(float(t[:-1] if scale > 1 else t) * scale)
    except (ValueError, OverflowError):  # OverflowError: inf
        raise ValueError(f"size '{text}' is not a number like 100K, 1.6M or 250000") from None
    if n <= 0:
        raise ValueError(f"size '{text}' must be positive")
    return n


def size_label(n: float, exact: bool = True) -> str:
    """100000 -> '100K', 1600000 -> '1.6M'. ``exact``: the integer unless parse_size reads the label back as n;
    otherwise 3 significant digits (for interpolated sizes)."""
    for unit, scale in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            label = f"{n / scale:.{4 if exact else 3}g}{unit}"
            return label if not exact or parse_size(label) == n else str(round(n))
    return str(round(n))


@dataclass(frozen=True)
class Match:
    """The Scratch size that matches a target: ``bound`` '=' (interpolated), '<=' (Scratch's smallest size
    already matches) or '>' (Scratch's largest size does not)."""
    bound: str
    size: float

    def text(self, reference: float) -> str:
        """'812K (8.12×)', '> 1.6M (> 16×)' or '≤ 100K (≤ 1×)' for a method's size ``reference``."""
        mark = {"=": "", "<=": "≤ ", ">": "> "}[self.bound]
        return f"{mark}{size_label(self.size, exact=False)} ({mark}{self.size / reference:.3g}×)"


def size_to_match(curve: list[tuple[float, float]], target: float, higher_is_better: bool) -> Match:
    """The smallest size at which ``curve`` ((size, metric) points) reaches ``target``, interpolating the metric
    linearly in log2(size) between the two points around the first crossing."""
    points = sorted((s, v if higher_is_better else -v) for s, v in curve if v is not None and math.isfinite(v))
    if not points:
        raise ValueError("no finite points on the curve")
    goal = target if higher_is_better else -target
    if points[0][1] >= goal:
        return Match("<=", points[0][0])
    for (s0, v0), (s1, v1) in zip(points, points[1:]):
        if v1 >= goal:
            t = (goal - v0) / (v1 - v0)
            return Match("=", 2 ** (math.log2(s0) + t * (math.log2(s1) - math.log2(s0))))
    return Match(">", points[-1][0])


def metric_titles(rows: list[dict]) -> dict[str, tuple[str, bool]]:
    """Metric key -> (title, higher is better), for the metrics these rows have."""
    out = {key: (head, higher) for key, head, higher, _ in INTRINSIC}
    name = next((r["downstream_metric"] for r in rows if r.get(DOWNSTREAM) is not None), None)
    if name:
        out[DOWNSTREAM] = (f"downstream {name}", True)
    return out


def efficiency(rows: list[dict], metric: str, higher_is_better: bool) -> dict[str, dict[int, Match]]:
    """arm -> size -> the Scratch size that matches the arm's ``metric`` at that size (``baseline_arm``)."""
    baseline = baseline_arm(rows)
    curve = [(r["size"], r.get(metric)) for r in rows if r["method"] == baseline]
    if not any(v is not None for _, v in curve):
        return {}
    out: dict[str, dict[int, Match]] = {}
    for r in rows:
        if r["method"] != baseline and r.get(metric) is not None:
            out.setdefault(r["method"], {})[r["size"]] = size_to_match(curve, r[metric], higher_is_better)
    return out


def _fmt(key: str, value, percent: bool) -> str:
    if value is None:
        return "–"
    if percent:
        return f"{100 * value:.2f}"
    return f"{value:.4f}" if key == "mrr" else f"{value:.2f}"


def _bold_best(cells: list[str], values: list, higher: bool) -> list[str]:
    finite = [v for v in values if v is not None]
    if len(finite) < 2:
        return cells
    best = max(finite) if higher else min(finite)
    return [f"**{c}**" if v == best else c for c, v in zip(cells, values)]


def _cell(r: dict, key: str, percent: bool) -> str:
    """The value, with ± the replicates' standard deviation when the row folds several seeds."""
    text, std = _fmt(key, r.get(key), percent), r.get(f"{key}_std")
    return text if std is None or r.get(key) is None else f"{text} ± {_fmt(key, std, percent)}"


def _downstream_cell(r: dict) -> str:
    if r.get(DOWNSTREAM) is None:
        return "–"
    std, diverged = r.get("downstream_std"), r.get("downstream_diverged")
    return (f"{100 * r[DOWNSTREAM]:.2f}" + ("" if std is None else f" ± {100 * std:.2f}")
            + (f" ({diverged} diverged)" if diverged else ""))


def _steps_run(r: dict) -> str:
    """The optimizer steps a run took (the seeds' mean), of those planned; rows from before ``steps_done`` was
    recorded show the plan."""
    done = r.get("steps_done")
    if done is None:
        return str(r["steps"])
    # a mean over seeds shown to a tenth, rounded down: one seed stopped early shows, 59.95 is not "60.0"
    return f"{done:.0f} of {r['steps']}" if done == int(done) else f"{math.floor(done * 10) / 10:.1f} of {r['steps']}"


def text_labels(rows: list[dict], source_text: dict | None = None) -> list[str]:
    """The ``--score-text`` labels of the rows and of the source's reference, in their order."""
    return list(dict.fromkeys([label for r in rows for label in r.get("text") or {}] + list(source_text or {})))


def _text_value(r: dict, label: str, key: str):
    return ((r.get("text") or {}).get(label) or {}).get(key)


def _text_cell(figures: dict | None, key: str, decimals: int) -> str:
    """A text figure (``figures``: one label's), with ± the replicates' standard deviation when there is one."""
    value, std = (figures or {}).get(key), (figures or {}).get(f"{key}_std")
    if value is None:
        return "–"
    return f"{value:.{decimals}f}" + ("" if std is None else f" ± {std:.{decimals}f}")


def text_columns(at: list[dict], labels: list[str]) -> list[list[str]]:
    """Per label, its bits per byte (lowest in bold) and pieces per word, one cell per row of ``at``."""
    columns = []
    for label in labels:
        for key, _, decimals, lower in TEXT_COLUMNS:
            cells = [_text_cell((r.get("text") or {}).get(label), key, decimals) for r in at]
            columns.append(cells if lower is None else _bold_best(cells, [_text_value(r, label, key) for r in at],
                                                                  not lower))
    return columns


def size_tables(rows: list[dict], unigram: dict | None = None, source_text: dict | None = None) -> list[str]:
    """One 002-Table-2-style table per size (best value per column in bold; mean ± std over replicates), plus
    downstream, the raw-text figures per ``--score-text`` label and run facts, and at the bottom the unigram
    predictor's row (``unigram``: its evaluate JSON) and the source's own raw-text figures (``source_text``)."""
    lines, downstream = [], any(r.get(DOWNSTREAM) is not None for r in rows)
    seeded = any(r.get("seeds") for r in rows)
    metric = next((r["downstream_metric"] for r in rows if r.get("downstream_metric")), "")
    labels = text_labels(rows, source_text)
    arms = ordered(rows)
    for size in sorted({r["size"] for r in rows}):
        at = sorted((r for r in rows if r["size"] == size), key=lambda r: arms.index(r["method"]))
        heads = [h for _, h, _, _ in INTRINSIC] + ([f"{metric} (×100)"] if downstream else [])
        heads += [f"{label} {head}" for label in labels for _, head, _, _ in TEXT_COLUMNS]
        heads += ["steps run", "epochs", "train s"] + (["seeds"] if seeded else [])
        columns = []
        for key, _, higher, percent in INTRINSIC:
            values = [r.get(key) for r in at]
            columns.append(_bold_best([_cell(r, key, percent) for r in at], values, higher))
        if downstream:
            values = [r.get(DOWNSTREAM) for r in at]
            columns.append(_bold_best([_downstream_cell(r) for r in at], values, True))
        columns += text_columns(at, labels)
        columns += [[_steps_run(r) for r in at], [f"{r['epochs']:.1f}" for r in at],
                    [f"{r['train_seconds']:.0f}" for r in at]] + ([[str(r.get("seeds", 1)) for r in at]] * seeded)
        title = size_label(size) + ("" if size_label(size) == str(size) else f" ({size:,})")
        lines += [f"### {title} training tokens", "",
                  "| Method | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
        lines += [f"| {display_name(r['method'])} | " + " | ".join(col[i] for col in columns) + " |"
                  for i, r in enumerate(at)]
        if unigram:
            cells = [_fmt(key, unigram.get(key), percent) for key, _, _, percent in INTRINSIC]
            lines.append("| *Unigram predictor* | " + " | ".join(cells + ["–"] * (len(heads) - len(cells))) + " |")
        if source_text:
            before = ["–"] * (len(INTRINSIC) + downstream)
            cells = [_text_cell(source_text.get(label), key, decimals) for label in labels
                     for key, _, decimals, _ in TEXT_COLUMNS]
            lines.append("| *Source (model.source)* | " + " | ".join(
                before + cells + ["–"] * (len(heads) - len(before) - len(cells))) + " |")
        lines.append("")
    seeds = next((r["downstream_seeds"] for r in rows if r.get("downstream_seeds")), None)
    majority = next((r["majority_accuracy"] for r in rows if r.get("majority_accuracy") is not None), None)
    if seeds:
        lines += [f"Downstream: test {metric}, mean ± std over {seeds} fine-tuning seed(s)" + (
            "." if majority is None else f"; the majority class scores accuracy {100 * majority:.2f}."), ""]
    return lines


def efficiency_tables(rows: list[dict], metrics: list[str]) -> list[str]:
    sizes = sorted({r["size"] for r in rows})
    if baseline_arm(rows) is None:
        several = sorted({r["method"] for r in rows if r.get("base_method") == BASELINE})
        return [f"Several Scratch arms ({', '.join(several)}) and none named scratch, so no data-efficiency ratio."
                if several else "No Scratch runs in this sweep, so no data-efficiency ratio.", ""]
    lines = []
    titles = metric_titles(rows)
    for metric in metrics:
        title, higher = titles[metric]
        table = efficiency(rows, metric, higher)
        if not table:
            continue
        lines += [f"Scratch data needed to match each method's {title} (ratio to the method's data):", "",
                  "| Method | " + " | ".join(size_label(s) for s in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
        for method in [m for m in ordered(rows) if m in table]:
            cells = [table[method][s].text(s) if s in table[method] else "–" for s in sizes]
            lines.append(f"| {display_name(method)} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def vs_unigram(rows: list[dict], unigram: dict | None) -> dict[str, dict[str, float]]:
    """method -> size label -> its (mean) Hits@1 over the unigram predictor's: at 1 a model predicts no better
    than word frequencies, and the report marks a ratio under 2."""
    base = (unigram or {}).get("hits@1")
    if not base:
        return {}
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.get("hits@1") is not None:
            out.setdefault(r["method"], {})[size_label(r["size"])] = r["hits@1"] / base
    return out


def unigram_lines(rows: list[dict], unigram: dict | None) -> list[str]:
    ratios = vs_unigram(rows, unigram)
    if not ratios:
        return []
    sizes = sorted({r["size"] for r in rows})
    lines = [f"Hits@1 over the unigram predictor's ({100 * unigram['hits@1']:.2f}); below 2× marked *:", "",
             "| Method | " + " | ".join(size_label(s) for s in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for method in ordered(rows):
        cells = [ratios[method].get(size_label(s)) for s in sizes]
        lines.append(f"| {display_name(method)} | " + " | ".join(
            "–" if c is None else f"{c:.2f}×" + ("*" if c < 2 else "") for c in cells) + " |")
    return lines + [""]


def read_unigram(out: Path) -> dict | None:
    path = out / "unigram.json"
    return read_json(path) if path.is_file() else None


def read_source_text(out: Path, rows: list[dict] = ()) -> dict | None:
    """DIR/source_text.json (``--score-text``): {label: the source's own figures on that text}; a label the rows
    also probed (``--probe-text``) has the same figures under LABEL_probe: the probe scores the source on that text
    in its own tokenizer, as evaluate --text does."""
    path = out / "source_text.json"
    if not path.is_file():
        return None
    source = read_json(path)
    probed = {label for r in rows for label in r.get("text") or {} if label.endswith(PROBE_SUFFIX)}
    return {**source, **{p: source[p.removesuffix(PROBE_SUFFIX)] for p in sorted(probed)
                         if p.removesuffix(PROBE_SUFFIX) in source}}


def text_lines(rows: list[dict], out: Path, source_text: dict | None) -> list[str]:
    """What the raw-text columns scored: each label's file (as the rows' scoring records it) and the source."""
    files = next((r["scoring"]["score_text"] for r in rows if (r.get("scoring") or {}).get("score_text")), None) or {}
    labels = text_labels(rows, source_text)
    if not labels:
        return []
    named = ", ".join(f"{label} = `{files[label]['file']}`" if label in files else label for label in labels)
    args = out / "source_text.args.json"
    source = read_json(args).get("source") if args.is_file() and source_text else None
    return [f"Raw text ({named}): bits per byte (lowest in bold) and pieces per word of each run's export in its own "
            "tokenizer (`xpt-ds evaluate --text`); bits per byte compares across tokenizers"
            + ("" if not source_text else f", and *Source (model.source)* is `{source or 'model.source'}` itself "
               "on the same text (source_text.json): what the adaptation cost it") + "."
            + "".join(f" *{label}* is the probe (`xpt-ds probe`, RUN_DIR/probe.json): the run's post-trained layers "
                      f"with the source's own embeddings and head, in the source's tokenizer, without the ITLs where "
                      "it has them (keep_vocab, extend: the source's untrained rows swapped back in), on "
                      f"{label.removesuffix(PROBE_SUFFIX)}'s text: what the layers kept, whatever the vocabulary "
                      "costs." for label in labels if label.endswith(PROBE_SUFFIX)), ""]


def scored_tokens(rows: list[dict]) -> str:
    """What the rows' metrics were computed on: a masked LM's masked tokens, a decoder's every next token."""
    causal = {r.get("objective") == "next_token" for r in rows}
    if causal == {True}:
        return "every next token"
    return "masked tokens (every next token for decoders)" if causal == {True, False} else "masked tokens"


def scored_shards(rows: list[dict]) -> str:
    """Which shards the rows were scored on (each row records them since 2026-11-28)."""
    shards = {tuple(r["scoring"]["test_shards"]) for r in rows if "scoring" in r}
    if len(shards) > 1:
        return ("the shards each row's scoring names, which differ between rows (a rerun with --rerun-changed "
                "scores them alike)")
    return ", ".join(f"`{s}`" for s in next(iter(shards))) if shards else "the test shards"


def efficiency_section(rows: list[dict]) -> list[str]:
    """How the ratio is read, then the "Scratch data needed to match" tables: PPL, and downstream when scored."""
    return ["For each method and data size s: the amount of data Scratch needs to reach the same value, "
            "interpolated linearly in log2(size) between Scratch's two sizes around the first crossing; "
            "'> X' = Scratch's largest size X does not reach it, '≤ X' = its smallest size X already does.", "",
            *efficiency_tables(rows, ["ppl"] + [DOWNSTREAM] * (DOWNSTREAM in metric_titles(rows)))]


def write_markdown(out: Path, rows: list[dict], failures: list[dict]) -> None:
    unigram = read_unigram(out)
    lines = ["# Sweep results", "",
             f"Intrinsic metrics on {scored_tokens(rows)} of {scored_shards(rows)} (002 Table 2: Hits@k ×100; best "
             "in bold; mean ± standard deviation over the seeds when there are several). Every run is planned for the "
             "same number of steps; 'steps run' is fewer where early stopping or a time budget ended a phase, and "
             "smaller data sizes are seen for more epochs.", ""]
    source_text = read_source_text(out, rows)
    lines += size_tables(rows, unigram, source_text)
    lines += text_lines(rows, out, source_text)
    lines += unigram_lines(rows, unigram)
    lines += ["## Data efficiency", ""] + efficiency_section(rows)
    if failures:
        lines += ["## Failed runs (this invocation)", ""]
        lines += [f"- {f.get('run') or display_name(f['method']) + ' ' + size_label(f['size'])}: {f['stage']} exited "
                  f"{f['exit']}; log `{f['log']}`" for f in failures]
        lines.append("")
    write_text_atomic(out / "results.md", "\n".join(lines))  # --pack archives it while a sweep may be rewriting it


def write_plots(out: Path, rows: list[dict]) -> list[Path]:
    """``plot_<metric>.png``: the metric against data size on a log2 x-axis, one line per method."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["size"] for r in rows})
    written = []
    for key, (head, higher) in metric_titles(rows).items():
        fig, ax = plt.subplots(figsize=(5, 3.6), dpi=120)
        for method in ordered(rows):
            std = "downstream_std" if key == DOWNSTREAM else f"{key}_std"
            pts = sorted((r["size"], r[key], r.get(std)) for r in rows
                         if r["method"] == method and r.get(key) is not None)
            if not pts:
                continue
            xs, ys, errs = zip(*pts)
            style = dict(marker="o", label=display_name(method), color=color(method, rows))
            if all(e is not None for e in errs):
                ax.errorbar(xs, ys, yerr=errs, capsize=3, **style)
            else:
                ax.plot(xs, ys, **style)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [size_label(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("training tokens")
        ax.set_ylabel(f"{head} ({'higher' if higher else 'lower'} is better)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"plot_{'downstream' if key == DOWNSTREAM else key.replace('@', '_at_')}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def write_tensorboard(out: Path, rows: list[dict]) -> None:
    """``tb/METHOD``: one writer per method; the step is the size's index in the sweep's sorted sizes (0 =
    smallest), and ``sweep/log2_size`` and ``sweep/size_tokens`` record which size that is."""
    from torch.utils.tensorboard import SummaryWriter

    shutil.rmtree(out / "tb", ignore_errors=True)  # rebuilt from results.jsonl: no duplicate events
    sizes = sorted({r["size"] for r in rows})
    metrics = metric_titles(rows)
    ratios = {m: efficiency(rows, m, higher) for m, (_, higher) in metrics.items()}
    for method in ordered(rows):
        writer = SummaryWriter(str(out / "tb" / method))
        for r in sorted((r for r in rows if r["method"] == method), key=lambda r: r["size"]):
            step = sizes.index(r["size"])
            writer.add_scalar("sweep/size_tokens", r["size"], step)
            writer.add_scalar("sweep/log2_size", math.log2(r["size"]), step)
            for key in metrics:
                if r.get(key) is not None:
                    writer.add_scalar(f"sweep/{key}", r[key], step)
                match = ratios[key].get(method, {}).get(r["size"])
                if match is not None and match.bound == "=":
                    writer.add_scalar(f"efficiency/{key}_scratch_ratio", match.size / r["size"], step)
        writer.close()


def summary(rows: list[dict], failures: list[dict], unigram: dict | None = None,
            source_text: dict | None = None) -> dict:
    eff = {}
    for metric, (_, higher) in metric_titles(rows).items():
        eff[metric] = {m: {size_label(s): {"scratch_tokens": round(x.size), "bound": x.bound,
                                           "ratio": x.size / s} for s, x in by_size.items()}
                       for m, by_size in efficiency(rows, metric, higher).items()}
    return {"methods": ordered(rows), "sizes": sorted({r["size"] for r in rows}),
            "runs": sum(r.get("seeds", 1) for r in rows), "rows": rows, "unigram": unigram,
            "source_text": source_text,
            "hits1_over_unigram": vs_unigram(rows, unigram),
            "efficiency_definition": "efficiency[metric][method][size]: the Scratch tokens whose metric equals the "
                                     "method's at that size (log2-linear interpolation on Scratch's curve) and their "
                                     "ratio to the size; bound '=' interpolated, '<=' Scratch's smallest size "
                                     "already matches, '>' its largest does not",
            "efficiency": eff, "failed": failures}


def fold_text(rows: list[dict], folded: list[dict]) -> list[dict]:
    """``folded`` (``aggregate``'s rows of ``rows``) with each seeded row's ``text`` folded as ``aggregate`` folds
    the flat scores, which it leaves as the first replicate's: per label and figure, the mean over the replicates
    that have it, and its sample standard deviation as ``KEY_std``."""
    values: dict[tuple[str, int], dict[str, dict[str, list]]] = {}
    for r in rows:
        for label, figures in (r.get("text") or {}).items():
            for key, value in figures.items():
                values.setdefault((r["method"], r["size"]), {}).setdefault(label, {}).setdefault(key, []).append(value)
    out = []
    for r in folded:
        text = values.get((r["method"], r["size"]))
        if text and r.get("seeds"):
            r = {**r, "text": {label: {k: v for key, vs in figures.items()
                                       for k, v in zip((key, f"{key}_std"), spread(vs))}
                               for label, figures in text.items()}}
        out.append(r)
    return out


def write_report(out: Path, rows: list[dict], failures: list[dict] = (), tensorboard: bool = True) -> None:
    """Everything from the rows of results.jsonl (replicates folded: ``xpt_ds.sweeps.seeds``, ``fold_text``)."""
    rows, failures = fold_text(rows, aggregate(rows)), list(failures)
    write_markdown(out, rows, failures)
    text = json.dumps(summary(rows, failures, read_unigram(out), read_source_text(out)), indent=2)
    write_text_atomic(out / "summary.json", text + "\n")
    if rows:
        write_plots(out, rows)
        if tensorboard:
            write_tensorboard(out, rows)


@cli_errors
def main(argv: list[str] | None = None) -> int:
    """``python -m xpt_ds.sweeps.report DIR...``: rewrite each sweep folder's report from the rows its
    results.jsonl holds now, for a sweep cut short or still running (a session packing what it has). Failures are
    not in results.jsonl, so the report lists none; ``--no-tensorboard`` leaves tb/ to the sweep's own report."""
    p = ArgumentParser(prog="python -m xpt_ds.sweeps.report", description=main.__doc__)
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="a sweep folder (its results.jsonl)")
    p.add_argument("--no-tensorboard", action="store_true", help="write no TensorBoard scalars")
    a = p.parse_args(argv)
    for d in a.dirs:
        if not (d / "results.jsonl").is_file():
            raise UserError(f"{d / 'results.jsonl'}: no such file (not a sweep folder)")
        rows = list(read_rows(d / "results.jsonl").values())
        write_report(d, rows, tensorboard=not a.no_tensorboard)
        print(f"{d / 'results.md'}: {len(rows)} run(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
