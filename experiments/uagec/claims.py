"""The papers' claims, judged from the sweeps of ``launch/gpu_uagec.sh`` (issue 22), rebuilt from its folder alone.

    python -m experiments.uagec.claims --out OUT

Reads ``OUT/{main,init,other_trelm,other_keep_vocab,rewind}/results.jsonl`` and their ``unigram.json`` (any may be
missing: a cut-short session judges what finished) and ``OUT/main/summary.json`` (the data-efficiency ratios).
Writes ``OUT/claims.md`` and ``OUT/claims.json``: every arm at the largest size beside the unigram predictor
(mean ± std over seeds), the fine-tuning table, and one verdict per claim with the numbers that decide it.

A difference counts as real only when it is larger than the seed spread: the gap between two arms' means must
exceed the sum of their standard deviations (a difference within that is 'within the seed spread'), and an arm
with one seed has no spread, so no difference of it is called real.
"""
from __future__ import annotations

import argparse
import itertools
import json
import shutil
from pathlib import Path
from statistics import mean, stdev

from xpt_ds.errors import cli_errors
from xpt_ds.sweeps.arms import METHOD_NAMES
from xpt_ds.sweeps.curves import curve, finish_plot
from xpt_ds.sweeps.report import parse_size, read_unigram, size_label
from xpt_ds.sweeps.report import efficiency_section as report_efficiency
from xpt_ds.sweeps.rows import read_json, read_rows
from xpt_ds.sweeps.seeds import aggregate

SWEEPS = ("main", "init", "other_trelm", "other_keep_vocab", "rewind")
TABLE2_ORDER = ("scratch", "adapters", "xpt_sp", "xpt")  # 002 Table 2: PPL falls, Hits@1 rises in this order
STARTS = ("xpt", "xpt_source_mean", "xpt_frequency_rank", "xpt_from_file")  # main's xpt: the random start
Curves = list[tuple[str, str, list[tuple[int, float]]]]  # (arm, seedN, (step, validation bits per char))
NAMES = {**METHOD_NAMES, "xpt": "XPT (random start)", "xpt_source_mean": "XPT, source_mean start",
         "xpt_frequency_rank": "XPT, frequency_rank start", "xpt_from_file": "XPT, from_file start",
         "keep_vocab": "Gogoulou et al. keep-vocabulary (source vocabulary)",
         "xpt_rewind": "XPT, phase 2 from phase 1's best (guard.early_stop_rewind)"}


def load(out: Path) -> dict[str, list[dict]]:
    """Sweep name -> its rows folded over seeds (``xpt_ds.sweeps.seeds``)."""
    return {name: aggregate(list(read_rows(out / name / "results.jsonl").values())) for name in SWEEPS}


def real_gap(a: dict, b: dict, key: str) -> float | None:
    """a[key] - b[key] when that gap exceeds both rows' standard deviations together, else None (within the seed
    spread, or a row with one seed)."""
    sa, sb = a.get(f"{key}_std"), b.get(f"{key}_std")
    if a.get(key) is None or b.get(key) is None or sa is None or sb is None:
        return None
    gap = a[key] - b[key]
    return gap if abs(gap) > sa + sb else None


def no_call(a: dict, b: dict, key: str) -> str:
    """Why ``real_gap`` made no call: a row with one seed has no spread to judge by."""
    one = a.get(f"{key}_std") is None or b.get(f"{key}_std") is None
    return "one seed, no spread to judge by" if one else "within the seed spread"


def gap_text(a: dict, b: dict, key: str) -> str:
    """``a[key] - b[key]`` where it counts (``real_gap``), else why it does not (``no_call``)."""
    gap = real_gap(a, b, key)
    return no_call(a, b, key) if gap is None else f"{gap:+.4g}"


def _pm(r: dict, key: str, scale: float = 1.0, digits: int = 2) -> str:
    """'mean ± std (n=seeds)'; the fine-tuned figure's spread and count pool every fine-tuning seed of every
    replicate (``xpt_ds.sweeps.seeds``)."""
    if r.get(key) is None:
        return "–"
    downstream = key == "downstream_mean"
    std = r.get("downstream_std" if downstream else f"{key}_std")
    n = r.get("downstream_seeds") if downstream else r.get("seeds", 1)
    diverged = f", {r['downstream_diverged']} diverged" if downstream and r.get("downstream_diverged") else ""
    return (f"{scale * r[key]:.{digits}f}" + ("" if std is None else f" ± {scale * std:.{digits}f}")
            + f" (n={n}{diverged})")


def order_verdict(rows: dict[str, dict], key: str, falling: bool) -> tuple[str, list[str]]:
    """002 Table 2's order for ``key`` over TABLE2_ORDER's adjacent pairs: 'reproduced' when every pair is in the
    claimed direction by more than the spread, 'not reproduced' when one is the other way by more than it, else
    'not measurable here'."""
    pairs, evidence, verdicts = [m for m in TABLE2_ORDER if m in rows], [], []
    for a, b in itertools.pairwise(pairs):
        gap = real_gap(rows[a], rows[b], key)
        raw = rows[a][key] - rows[b][key]
        want = raw > 0 if falling else raw < 0
        state = no_call(rows[a], rows[b], key) if gap is None else ("as claimed" if want else "the other way")
        verdicts.append(state)
        evidence.append(f"{NAMES[a]} {rows[a][key]:.4g} vs {NAMES[b]} {rows[b][key]:.4g}: {state}")
    if len(pairs) < 4:
        return "not measurable here (arms missing: " + ", ".join(m for m in TABLE2_ORDER if m not in rows) + ")", \
            evidence
    if "the other way" in verdicts:
        return "not reproduced", evidence
    return ("reproduced" if all(v == "as claimed" for v in verdicts) else "not measurable here"), evidence


def at_size(rows: list[dict], size: int) -> dict[str, dict]:
    return {r["method"]: r for r in rows if r["size"] == size}


def judge(out: Path) -> dict:
    sweeps, unigram = load(out), read_unigram(out / "main") or read_unigram(out / "init")
    main = sweeps["main"]
    sizes = sorted({r["size"] for r in main})
    claims: dict[str, dict] = {}
    if not sizes:
        return {"claims": {}, "note": "no finished run in OUT/main"}
    largest, smallest = sizes[-1], sizes[0]
    top = {**at_size(main, largest), **at_size(sweeps["init"], largest), **at_size(sweeps["other_trelm"], largest)}
    verdict, evidence = order_verdict(top, "ppl", falling=True)
    hits, hits_evidence = order_verdict(top, "hits@1", falling=False)
    claims["002 Table 2: PPL Scratch > Adapters > XPT-SP > XPT, Hits@1 rising"] = {
        "verdict": verdict if verdict == hits else f"PPL: {verdict}; Hits@1: {hits}",
        "evidence": [f"at {size_label(largest)} tokens"] + evidence + hits_evidence}
    base = (unigram or {}).get("hits@1")
    if base:
        low = [f"{NAMES.get(m, m)} {r['hits@1'] / base:.2f}×" for m, r in top.items() if r["hits@1"] < 2 * base]
        claims["issue 22: every model's Hits@1 at least twice the unigram predictor's"] = {
            "verdict": "met" if not low else "not met", "evidence": [f"unigram Hits@1 {100 * base:.2f}"] + (
                [f"below 2×: {', '.join(low)}"] if low else [])}
    claims["002 Figures 3-4: XPT worth about 2x the data intrinsically, up to 32x downstream, most at small data"] = \
        efficiency_claim(out)
    both = [size for size in sizes if {"scratch", "xpt"} <= set(at_size(main, size))]
    small = both[0] if both else smallest  # the smallest size with both arms (a cut-short sweep may lack one)
    claims["000 Table 2: Scratch collapses on small data, XPT does not"] = collapse_claim(at_size(main, small),
                                                                                         base, small)
    claims["004 Table 5 and 003: the start of the new embeddings matters"] = starts_claim(top)
    return {"largest": largest, "smallest": smallest, "unigram": unigram, "claims": claims,
            "arms": dict(top), "time_stopped": time_stopped_runs(out),
            "keep_vocab": sweeps["other_keep_vocab"], "keep_vocab_unigram": read_unigram(out / "other_keep_vocab")}


def time_stopped_runs(out: Path) -> list[str]:
    """'sweep: method size seed N (phases)' for every run whose phases its time budget ended
    (guard.max_train_minutes; the row's ``time_stopped``), in sweep order."""
    found = []
    for name in SWEEPS:
        for r in read_rows(out / name / "results.jsonl").values():
            if r.get("time_stopped"):
                found.append(f"{name}: {r['method']} {size_label(r['size'])} seed {r['seed']} "
                             f"({', '.join(r['time_stopped'])})")
    return found


def efficiency_claim(out: Path) -> dict:
    """Each part of the claim on its own: about 2x intrinsically (PPL), more downstream, and the most at the
    smallest size. A ratio counts when Scratch's curve crosses XPT's value ('=') or never reaches it ('>', a lower
    bound). A lower bound under 2x decides nothing (the ratio may be any larger), and 'the most at the smallest
    size' needs two sizes or more."""
    path = out / "main" / "summary.json"
    eff = read_json(path).get("efficiency", {}) if path.is_file() else {}
    evidence, parts = [], []
    for metric, name in (("ppl", "intrinsic"), ("downstream_mean", "downstream")):
        by_size = sorted((parse_size(size), m) for size, m in (eff.get(metric, {}).get("xpt") or {}).items())
        for size, m in by_size:
            evidence.append(f"{name} at {size_label(size)}: Scratch needs {m['bound']} "
                            f"{size_label(m['scratch_tokens'])} ({m['ratio']:.3g}×)")
        counted = [(size, m["ratio"]) for size, m in by_size if m["bound"] in ("=", ">")]
        if not counted:
            parts.append(f"{name}: not measurable here")
            continue
        top = max(r for _, r in counted)
        bounded = [m["ratio"] for _, m in by_size if m["bound"] == ">"]
        if top >= 2:
            parts.append(f"{name}: reproduced (at least {top:.3g}×)" if top in bounded
                         else f"{name}: reproduced ({top:.3g}×)")
        elif bounded:
            short = [size_label(size) for size, m in by_size if m["bound"] == ">"]
            reached = [m["ratio"] for _, m in by_size if m["bound"] in ("=", "<=")]
            parts.append(f"{name}: not measurable here (Scratch did not reach XPT's value at "
                         f"{'any size run' if not reached else ', '.join(short)}: at least {max(bounded):.3g}×, "
                         "a lower bound" + (f"; at most {max(reached):.3g}× where it did)" if reached else ")"))
        else:
            parts.append(f"{name}: not reproduced (at most {top:.3g}×)")
        if metric == "ppl":
            parts.append("largest at the smallest size: " + largest_at_smallest(by_size))
    if not evidence:
        return {"verdict": "not measurable here (no Scratch and XPT curves)", "evidence": evidence}
    stopped = sorted({r["size"] for r in read_rows(out / "main" / "results.jsonl").values()
                      if r["method"] == "scratch" and r.get("time_stopped")})
    if stopped:
        evidence.append(f"Scratch at {', '.join(map(size_label, stopped))} was ended by the time budget, not by its "
                        "validation loss: the ratios are against what that budget bought Scratch")
    return {"verdict": "; ".join(parts) + " (ratios of seed means; the size tables give the spread)",
            "evidence": evidence}


def largest_at_smallest(by_size: list[tuple[int, dict]]) -> str:
    """Whether XPT's data ratio is largest at the smallest size. A '>' ratio is a lower bound (Scratch never
    reached XPT's value) and a '<=' one an upper bound (Scratch's smallest size already did), so the smallest
    size's ratio shows itself larger than another only when its lower bound ('=', '>') is at least that other's
    upper bound ('=', '<='), and smaller only when the other's lower bound exceeds its own upper bound."""
    counted = [m for _, m in by_size if m["bound"] in ("=", ">", "<=")]
    if len(counted) < 2:
        return "not measurable here (one size)"
    first, rest = counted[0], counted[1:]
    if first["bound"] != ">" and any(m["bound"] != "<=" and m["ratio"] > first["ratio"] for m in rest):
        return "no"
    if first["bound"] != "<=" and all(m["bound"] != ">" and m["ratio"] <= first["ratio"] for m in rest):
        return "yes"
    if first["bound"] == "<=":
        return "not measurable here (at the smallest size Scratch's smallest size already reached XPT: an upper bound)"
    if first["bound"] == ">" and any(m["ratio"] > first["ratio"] for m in rest):
        return "not measurable here (at the smallest size Scratch never reached XPT: a lower bound)"
    return "not measurable here (at the larger sizes Scratch never reached XPT: only lower bounds there)"


def collapse_claim(small: dict[str, dict], base: float | None, size: int) -> dict:
    """Scratch 'collapses' when its Hits@1 is within 10 % of the unigram predictor's; XPT 'does not' when its Hits@1
    is at least twice that. Whether Scratch collapsed is one observation per run; the PPL gap beside it counts only
    beyond the seed spread."""
    s, x = small.get("scratch"), small.get("xpt")
    if not s or not x or not base:
        return {"verdict": "not measurable here (Scratch, XPT or the unigram predictor missing)", "evidence": []}
    evidence = [(f"at {size_label(size)} tokens: Hits@1 over unigram: Scratch {s['hits@1'] / base:.2f}×, "
                 f"XPT {x['hits@1'] / base:.2f}×; PPL Scratch {s['ppl']:.4g}, XPT {x['ppl']:.4g}")]
    gap = real_gap(s, x, "ppl")
    ppl = (no_call(s, x, "ppl") if gap is None else
           "XPT's PPL lower by more than the seed spread" if gap > 0 else "Scratch's PPL lower by more than the spread")
    if s["hits@1"] > 1.1 * base:
        return {"verdict": f"not reproduced: Scratch does not collapse to the unigram predictor (Hits@1 "
                           f"{s['hits@1'] / base:.2f}× its; PPL: {ppl})", "evidence": evidence}
    if x["hits@1"] < 2 * base:
        return {"verdict": "not reproduced: XPT stays near the unigram predictor too", "evidence": evidence}
    return {"verdict": "reproduced", "evidence": evidence}


def starts_claim(top: dict[str, dict]) -> dict:
    """004 Table 5 and 003: a start 'matters' when its PPL differs from the random start's by more than the seed
    spread; the verdict says in which direction (the papers' informed starts beat the random one)."""
    present = [m for m in STARTS if m in top]
    if len(present) < 2:
        return {"verdict": "not measurable here (starts missing)", "evidence": []}
    if "xpt" not in top:
        return {"verdict": "not measurable here (the random start, main's XPT, missing)", "evidence": []}
    evidence, better, worse = [], [], []
    ref = top["xpt"]
    for m in present:
        if top[m] is ref:
            continue
        gap = real_gap(top[m], ref, "ppl")
        evidence.append(f"{NAMES[m]} PPL {top[m]['ppl']:.4g} vs random {ref['ppl']:.4g}: "
                        + gap_text(top[m], ref, "ppl"))
        if gap is not None:
            (better if gap < 0 else worse).append(NAMES[m])
    if not better and not worse:
        return {"verdict": "not measurable here (no start differs from the random one beyond the seed spread)",
                "evidence": evidence}
    sides = [f"better than the random start: {', '.join(better)}"] * bool(better) + [
        f"worse than the random start: {', '.join(worse)}"] * bool(worse)
    return {"verdict": "reproduced (" + "; ".join(sides) + ")", "evidence": evidence}


def size_curves(out: Path, size: int) -> Curves:
    """(arm, seedN, validation bits per character by step) of every run at ``size`` (each sweep's
    ``runs/METHOD/SIZE/seedN/metrics.jsonl``; not ``seedN.superseded`` and the like)."""
    runs = sorted(out.glob(f"*/runs/*/{size_label(size)}/seed*/metrics.jsonl"))
    return [(path.parts[-4], path.parent.name, c) for path in runs
            if path.parts[-6] in SWEEPS and path.parent.name[4:].isdigit() and (c := curve(path.parent))]


def equal_steps_section(curves: Curves) -> list[str]:
    """Every arm's validation bits per character at the last step every run validated at: the time budget gives
    the arms different numbers of steps (a frozen phase's steps are cheaper), and this compares them at the same
    number. The validation split, not the test text; bits per character compare across vocabularies."""
    common = set.intersection(*(set(s for s, _ in points) for _, _, points in curves)) if curves else set()
    if not common:
        return []
    step, values = max(common), {}
    for arm, _seed, points in curves:
        values.setdefault(arm, []).append(dict(points)[step])
    lines = [f"Validation bits per character at step {step}, the last step every run at this size validated at "
             "(the time budget gives the arms different numbers of steps; the validation split, not the test text):",
             "", "| arm | bits/char at the same step |", "|---|---|"]
    for arm, vals in sorted(values.items(), key=lambda kv: mean(kv[1])):
        spread = f" ± {stdev(vals):.3f}" if len(vals) > 1 else ""
        lines.append(f"| {NAMES.get(arm, arm)} | {mean(vals):.3f}{spread} (n={len(vals)}) |")
    return lines + [""]


def plot_curves(out: Path, curves: Curves, unigram_bpc: float | None) -> bool:
    """OUT/valid_curves.png: the runs' validation bits per character (``size_curves``), one colour per arm, and the
    unigram predictor's test figure; False when no run left a curve."""
    if not curves:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 6))
    colours = {m: plt.cm.tab10(i) for i, m in enumerate(dict.fromkeys(m for m, _, _ in curves))}
    labelled = set()
    for method, _seed, points in curves:
        steps, bpc = zip(*points)
        ax.plot(steps, bpc, color=colours[method], linewidth=1,
                label=None if method in labelled else NAMES.get(method, method))
        labelled.add(method)
    if unigram_bpc:
        ax.axhline(unigram_bpc, color="grey", linestyle="--", label="unigram predictor (test text)")
    finish_plot(fig, [ax], "optimizer step", "validation bits per character (masked pieces)", out / "valid_curves.png")
    return True


def efficiency_section(out: Path, main: list[dict]) -> list[str]:
    """The main sweep's data-efficiency figure (PPL against training tokens, 002 Figure 3's style: its report's
    plot_ppl.png, copied to OUT/efficiency_ppl.png beside claims.md) and its "Scratch data needed to match" tables
    (``report.efficiency_section`` of its rows ``main``, folded over seeds), when it ran two sizes or more."""
    if len({r["size"] for r in main}) < 2:
        return []
    lines = ["## Data efficiency (the main sweep: 002 Figure 3 and the Scratch data needed to match)", ""]
    plot = out / "main" / "plot_ppl.png"
    if plot.is_file():
        shutil.copyfile(plot, out / "efficiency_ppl.png")
        lines += ["PPL against training tokens, every arm (the main sweep's plot_ppl.png; its plot_downstream.png "
                  "is the fine-tuned accuracy):", "", "![PPL against training tokens](efficiency_ppl.png)", ""]
    return lines + report_efficiency(main)


REWOUND = "the next phase starts from the best checkpoint"  # the trainer's line where a run rewinds


def rewound(out: Path, size: int) -> str:
    """'K of N': how many of the rewind sweep's runs at ``size`` (``rewind/runs/*/SIZE/seedN/train.log``) did
    rewind; '–' without their logs."""
    logs = [p for p in sorted(out.glob(f"rewind/runs/*/{size_label(size)}/seed*/train.log"))
            if p.parent.name[4:].isdigit()]
    return f"{sum(REWOUND in p.read_text(errors='replace') for p in logs)} of {len(logs)}" if logs else "–"


def rewind_section(out: Path, sweeps: dict[str, list[dict]]) -> list[str]:
    """The rewind sweep (XPT with guard.early_stop_rewind) beside the main sweep's XPT and XPT-SP at its sizes, how
    many of its runs did rewind, and whether it differs from XPT beyond the seed spread."""
    rewind = {r["size"]: r for r in sweeps["rewind"]}
    if not rewind:
        return []
    lines = ["## XPT's phase hand-over at small data (the rewind sweep)", "",
             "XPT with `guard.early_stop_rewind`: where phase 1 ends past its best checkpoint, phase 2 starts from "
             "that checkpoint, not from where phase 1 stopped. A run whose phase 1 ended at its best, or by its "
             "planned steps, is main's XPT run again. Which runs rewound is read from their `train.log` "
             f"(\"{REWOUND}\").", "",
             "| size | arm | PPL | Hits@1 ×100 | steps run | fine-tuned accuracy ×100 | runs rewound |",
             "|---|---|---|---|---|---|---|"]
    verdicts = []
    for size, r in sorted(rewind.items()):
        main = at_size(sweeps["main"], size)
        for m, row in (("xpt_rewind", r), ("xpt", main.get("xpt")), ("xpt_sp", main.get("xpt_sp"))):
            if row:
                lines.append(f"| {size_label(size)} | {NAMES[m]} | {_pm(row, 'ppl')} | {_pm(row, 'hits@1', 100)} | "
                             f"{_pm(row, 'steps_done', 1, 0)} | {_pm(row, 'downstream_mean', 100)} | "
                             f"{rewound(out, size) if m == 'xpt_rewind' else '–'} |")
        if main.get("xpt"):
            verdicts.append(f"- at {size_label(size)}: PPL {r['ppl']:.4g} against XPT's {main['xpt']['ppl']:.4g}: "
                            + gap_text(r, main["xpt"], "ppl"))
    return lines + [""] + verdicts + [""]


def write(out: Path) -> dict:
    result = judge(out)
    lines = ["# Issue 22: the papers' claims at GPU compute", ""]
    if result.get("arms"):
        lines += [f"## Every arm at {size_label(result['largest'])} training tokens (mean ± std over seeds)", "",
                  "| arm | PPL | Hits@1 ×100 | MRR | bits/char | steps run | fine-tuned accuracy ×100 |",
                  "|---|---|---|---|---|---|---|"]
        for m, r in result["arms"].items():
            lines.append(f"| {NAMES.get(m, m)} | {_pm(r, 'ppl')} | {_pm(r, 'hits@1', 100)} | {_pm(r, 'mrr', 1, 4)} | "
                         f"{_pm(r, 'bits_per_char', 1, 3)} | {_pm(r, 'steps_done', 1, 0)} | "
                         f"{_pm(r, 'downstream_mean', 100)} |")
        u = result.get("unigram")
        if u:
            lines.append(f"| *unigram predictor* | {u['ppl']:.2f} | {100 * u['hits@1']:.2f} | {u['mrr']:.4f} | "
                         f"{u.get('bits_per_char', float('nan')):.3f} | – | – |")
        majority = next((r.get("majority_accuracy") for r in result["arms"].values() if r.get("majority_accuracy")),
                        None)
        if majority is not None:
            lines.append(f"| *majority class* | – | – | – | – | – | {100 * majority:.2f} |")
        for r in result.get("keep_vocab") or []:
            lines.append(f"| {NAMES['keep_vocab']} | {_pm(r, 'ppl')} (own vocabulary) | {_pm(r, 'hits@1', 100)} | "
                         f"{_pm(r, 'mrr', 1, 4)} | {_pm(r, 'bits_per_char', 1, 3)} | {_pm(r, 'steps_done', 1, 0)} | "
                         f"{_pm(r, 'downstream_mean', 100)} |")
        lines += ["", "PPL, Hits@1 and MRR compare only within one vocabulary; bits per character compare across.", ""]
    if result.get("time_stopped"):
        lines += ["Runs whose time budget (guard.max_train_minutes) ended phases before their validation loss stopped "
                  "improving or their planned steps (the phases in brackets):", ""]
        lines += [f"- {line}" for line in result["time_stopped"]] + [""]
    curves = size_curves(out, result["largest"]) if result.get("arms") else []
    if plot_curves(out, curves, (result.get("unigram") or {}).get("bits_per_char")):
        lines += ["Validation bits per character against step, every run at that size (one line per seed):", "",
                  "![validation curves](valid_curves.png)", ""]
        lines += equal_steps_section(curves)
    sweeps = load(out)
    lines += efficiency_section(out, sweeps["main"]) + rewind_section(out, sweeps)
    lines += ["## Verdicts", ""] + ([f"No verdicts: {result['note']}.", ""] if result.get("note") else [])
    for claim, v in result["claims"].items():
        lines += [f"- **{claim}: {v['verdict']}.**"] + [f"  - {e}" for e in v["evidence"]]
    (out / "claims.md").write_text("\n".join(lines) + "\n")
    (out / "claims.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.uagec.claims", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="launch/gpu_uagec.sh's OUT")
    a = p.parse_args(argv)
    if not a.out.is_dir():
        raise FileNotFoundError(f"--out {a.out}: no such directory (launch/gpu_uagec.sh's OUT)")
    write(a.out)
    print(a.out / "claims.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
