"""Issue 57's verdicts: does XPT help a decoder (SmolLM2-135M, English -> Ukrainian) against LoRA, vocabulary
extension and continued pretraining, and what does each method cost English; rebuilt from the session's folder alone.

    python -m experiments.decoder.claims --out OUT

Reads the session's three sweeps, any of which may be missing (a cut-short session judges what finished):
``OUT/target/`` (scratch, lora, xpt_no_itl, xpt, xpt_sp, xpt_subword_mean in the new SentencePiece vocabulary),
``OUT/keep_vocab/`` (continued pretraining in the source's tokenizer) and ``OUT/extend/`` (the source's tokenizer
extended with Ukrainian pieces): each one's ``results.jsonl``, ``unigram.json`` and ``source_text.json`` (the
untouched source's bits per byte on the English and the Ukrainian text); and ``OUT/sizes.json``, each sweep's three
training sizes: the same share of the corpus counted in that sweep's own pieces, so rows of different sweeps are
compared by the index of their size in their sweep's list, never by the size itself. A run's ``text`` holds its
export's bits per byte on the same English (``en``) and Ukrainian (``uk``) raw text in its own tokenizer: the figure
that compares across tokenizers, and the only one judged. Writes ``OUT/claims.md``, ``OUT/claims.json`` and
``OUT/plot_retention.png`` (Ukrainian against English bits per byte, one point per arm and size, and the source).

A difference counts as real only when it is larger than the seed spread (``experiments.uagec.claims``): the gap
between two arms' means must exceed the sum of their standard deviations, and an arm with one seed has no spread,
so no difference of it is called. An arm's English cost (its English bits per byte minus the source's one value)
counts when it exceeds the arm's own standard deviation.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from experiments.uagec.claims import _pm, no_call, real_gap
from xpt_ds.errors import UserError, cli_errors
from xpt_ds.sweeps.arms import METHOD_NAMES
from xpt_ds.sweeps.curves import finish_plot
from xpt_ds.sweeps.report import read_unigram, size_label
from xpt_ds.sweeps.rows import read_json, read_rows
from xpt_ds.sweeps.seeds import aggregate, spread

SWEEPS = ("target", "keep_vocab", "extend")
ARMS = ("scratch", "lora", "xpt_no_itl", "xpt", "xpt_sp", "xpt_subword_mean", "keep_vocab", "extend",
        "extend_subword_mean")
XPT_ARMS = ("xpt", "xpt_subword_mean")  # "XPT" in a verdict: the one of these with the lower Ukrainian bits per byte
RIVALS = {"lora": "does XPT beat LoRA", "extend": "does XPT beat vocabulary extension",
          "keep_vocab": "does XPT beat continued pretraining (keep_vocab)"}
# a rival in a verdict: the one of its arms with the lower Ukrainian bits per byte (extension's two starts)
RIVAL_ARMS = {"lora": ("lora",), "extend": ("extend", "extend_subword_mean"), "keep_vocab": ("keep_vocab",)}
NAMES = {**METHOD_NAMES, "xpt_subword_mean": "XPT, subword_mean start", "extend": "vocabulary extension",
         "extend_subword_mean": "vocabulary extension, subword_mean start",
         "keep_vocab": "continued pretraining (source tokenizer)"}
# A run's own figures beside aggregate()'s: (key, where in the row). tokens_per_s is tokens_seen / train_seconds.
TEXT_FIGURES = (("uk_bpb", "uk", "bits_per_byte"), ("en_bpb", "en", "bits_per_byte"),
                ("uk_ppw", "uk", "pieces_per_word"), ("en_ppw", "en", "pieces_per_word"),
                ("en_layers_bpb", "en_probe", "bits_per_byte"))  # the sweep's --probe-text en: the layers alone
FIGURES = tuple(key for key, _, _ in TEXT_FIGURES) + ("tokens_per_s",)
SHOWN = ("uk_bpb", "en_bpb", "en_cost", "en_layers_bpb", "uk_ppw", "en_ppw", "loss", "steps_done",
         "tokens_per_s")  # claims.json's


def run_figures(r: dict) -> dict:
    """One run's row with its raw-text figures and its training throughput as flat keys (``FIGURES``)."""
    flat = {k: v for k, v in r.items() if k not in FIGURES}
    for key, label, figure in TEXT_FIGURES:
        value = ((r.get("text") or {}).get(label) or {}).get(figure)
        if isinstance(value, (int, float)) and math.isfinite(value):
            flat[key] = value
    if r.get("tokens_seen") and r.get("train_seconds"):
        flat["tokens_per_s"] = r["tokens_seen"] / r["train_seconds"]
    return flat


def fold(runs: list[dict]) -> dict:
    """One arm's runs at one size as one row: ``aggregate``'s mean ± std over the seeds for the shard scores and
    run facts, and the same for ``FIGURES`` over the runs that have them (``KEY_n`` of them)."""
    row = dict(aggregate(runs)[0])
    for key in FIGURES:
        values = [r[key] for r in runs if key in r]
        if values:
            row[key], row[f"{key}_std"] = spread(values)
            row[f"{key}_n"] = len(values)
    return row


def run_name(sweep: str, r: dict) -> str:
    return f"{sweep}: {r['method']} {size_label(r['size'])} seed {r.get('seed')}"


def read_session(out: Path) -> dict:
    """Every file of the session that is there, and a setup line for each that is not."""
    found = [name for name in SWEEPS if (out / name / "results.jsonl").is_file()]
    if not found:
        raise UserError(f"{out}: none of {', '.join(s + '/results.jsonl' for s in SWEEPS)} is there: "
                        "no finished run of issue 57's session to judge")
    runs = {name: [run_figures(r) for r in read_rows(out / name / "results.jsonl").values()] for name in found}
    read = [f"{name}/results.jsonl ({len(runs[name])} runs)" for name in found]
    missing = [f"{name}/" if not (out / name).is_dir() else f"{name}/results.jsonl" for name in SWEEPS
               if name not in found]
    unigram, sources = {}, {}
    for name in SWEEPS:
        if not (out / name).is_dir():
            continue
        for file in ("unigram.json", "source_text.json"):
            (read if (out / name / file).is_file() else missing).append(f"{name}/{file}")
        unigram[name] = read_unigram(out / name)
        if (out / name / "source_text.json").is_file():
            sources[name] = read_json(out / name / "source_text.json")
    sizes = read_json(out / "sizes.json") if (out / "sizes.json").is_file() else None
    (read if sizes else missing).append("sizes.json")
    notes, plan = [], plan_sizes(sizes, runs)
    guessed = [name for name in found if name not in ((sizes or {}).get("sweeps") or {})]
    if guessed:
        notes.append(f"no sizes.json list for {', '.join(guessed)}: its sizes are aligned by their order among its "
                     "own runs' sizes (smallest first), which assumes no size is missing")
    source_from = next(iter(sources), None)
    differing = [name for name in sources if sources[name] != sources[source_from]]
    if differing:
        notes.append(f"source_text.json of {', '.join(differing)} differs from {source_from}'s: {source_from}'s used")
    return {"runs": runs, "plan": plan, "fractions": (sizes or {}).get("fractions"), "read": read,
            "missing": missing, "notes": notes, "unigram": {k: v for k, v in unigram.items() if v},
            "source": sources.get(source_from), "source_from": source_from}


def plan_sizes(sizes: dict | None, runs: dict[str, list[dict]]) -> dict[str, list[int]]:
    """Each sweep's training sizes, smallest first: sizes.json's list (whole numbers; one written as 150000.0 is
    read as 150000), else the sizes its runs have."""
    listed = (sizes or {}).get("sweeps") or {}
    return {name: [int(s) for s in listed[name]] if name in listed else sorted({r["size"] for r in runs.get(name, [])})
            for name in SWEEPS if name in listed or name in runs}


def by_size(session: dict) -> tuple[dict[int, dict[str, dict]], list[str]]:
    """Size index -> arm -> its runs folded (``fold``, with its ``sweep`` and the source's English cost), and the
    runs whose size is not in their sweep's list (left out)."""
    groups: dict[int, dict[str, tuple[str, list[dict]]]] = {}
    unaligned = []
    for sweep, runs in session["runs"].items():
        for r in runs:
            if r["size"] not in session["plan"][sweep]:
                unaligned.append(run_name(sweep, r))
                continue
            arms, arm = groups.setdefault(session["plan"][sweep].index(r["size"]), {}), r["method"]
            if arm in arms and arms[arm][0] != sweep:  # the same arm in two sweeps: both shown, named apart
                arm = f"{arm} ({sweep})"
            arms.setdefault(arm, (sweep, []))[1].append(r)
    source_en = ((session["source"] or {}).get("en") or {}).get("bits_per_byte")
    table = {}
    for index, arms in sorted(groups.items()):
        table[index] = {}
        for arm in sorted(arms, key=lambda a: ARMS.index(a) if a in ARMS else len(ARMS)):
            sweep, runs = arms[arm]
            row = {**fold(runs), "sweep": sweep}
            if source_en is not None and row.get("en_bpb") is not None:
                row["en_cost"], row["en_cost_std"] = row["en_bpb"] - source_en, row.get("en_bpb_std")
            table[index][arm] = row
    return table, unaligned


def better_xpt(arms: dict[str, dict], candidates: tuple[str, ...] = XPT_ARMS) -> str | None:
    """The arm of ``candidates`` (XPT's starts) with the lower mean Ukrainian bits per byte (the first on a tie)."""
    measured = [a for a in candidates if (arms.get(a) or {}).get("uk_bpb") is not None]
    return min(measured, key=lambda a: arms[a]["uk_bpb"]) if measured else None


def _cell(r: dict, key: str, digits: int = 4) -> str:
    """'mean ± std (n=runs with that figure)' (``_pm``)."""
    return _pm({**r, "seeds": r.get(f"{key}_n", r.get("seeds", 1))}, key, 1.0, digits)


def _num(r: dict, key: str, digits: int, sign: str = "") -> str:
    """'mean ± std', no count: a figure the row's other cells already count."""
    if r.get(key) is None:
        return "–"
    std = r.get(f"{key}_std")
    return f"{r[key]:{sign}.{digits}f}" + ("" if std is None else f" ± {std:.{digits}f}")


def versus(arms: dict[str, dict], rival: str) -> dict:
    """Whether the better XPT start beats ``rival`` (the better of its arms, ``RIVAL_ARMS``) on Ukrainian bits per byte
    (lower is better): 'yes' or 'no' when the gap exceeds the summed seed spreads, 'no call' within them or with one
    seed, 'not measured' without."""
    x, lacking = better_xpt(arms), []
    if x is None:
        lacking.append("XPT missing (neither xpt nor xpt_subword_mean has text scores)")
    present = [a for a in RIVAL_ARMS[rival] if a in arms]
    if not present:
        lacking.append(f"{rival} missing")
    elif better_xpt(arms, RIVAL_ARMS[rival]) is None:
        lacking.append(f"{' and '.join(present)} {'has' if len(present) == 1 else 'have'} no text scores")
    if lacking:
        return {"verdict": "not measured", "text": "; ".join(lacking)}
    rival = better_xpt(arms, RIVAL_ARMS[rival])
    a, b = arms[x], arms[rival]
    gap, raw = real_gap(a, b, "uk_bpb"), a["uk_bpb"] - b["uk_bpb"]
    verdict = "no call" if gap is None else ("yes" if gap < 0 else "no")
    why = no_call(a, b, "uk_bpb") if gap is None else \
        f"beyond the summed seed spread ({a['uk_bpb_std'] + b['uk_bpb_std']:.4f})"
    text = (f"{NAMES.get(x, x)} {_cell(a, 'uk_bpb')} against {NAMES.get(rival, rival)} "
            f"{_cell(b, 'uk_bpb')} Ukrainian bits per byte, {raw:+.4f}: {why}")
    return {"verdict": verdict, "text": text, "xpt_arm": x, "xpt": a["uk_bpb"], "xpt_std": a.get("uk_bpb_std"),
            "xpt_n": a.get("uk_bpb_n"), "rival": b["uk_bpb"], "rival_std": b.get("uk_bpb_std"),
            "rival_n": b.get("uk_bpb_n"), "difference": raw, "beyond_spread": gap is not None}


def english_cost(arms: dict[str, dict], source: dict | None) -> dict[str, dict]:
    """Per arm: its English bits per byte over the source's, and whether that exceeds the arm's own seed spread
    (the source's is one value: ``real_gap`` against it with no spread)."""
    source_en = ((source or {}).get("en") or {}).get("bits_per_byte")
    costs = {}
    for arm, r in arms.items():
        if r.get("en_bpb") is None or source_en is None:
            why = "no source_text.json" if source_en is None else "no English text score"
            costs[arm] = {"verdict": "not measured", "text": f"{NAMES.get(arm, arm)}: not measured ({why})"}
            continue
        ref = {"en_bpb": source_en, "en_bpb_std": 0.0}
        gap = real_gap(r, ref, "en_bpb")
        verdict = "no call" if gap is None else ("costs English" if gap > 0 else "improves English")
        why = no_call(r, ref, "en_bpb") if gap is None else "beyond its own seed spread"
        costs[arm] = {"verdict": verdict, "cost": r["en_cost"], "cost_std": r.get("en_cost_std"),
                      "n": r.get("en_bpb_n"), "beyond_spread": gap is not None,
                      "text": f"{NAMES.get(arm, arm)}: {_num(r, 'en_cost', 4, '+')} (n={r.get('en_bpb_n')}) English "
                              f"bits per byte over the source's {source_en:.4f}: {verdict}, {why}"}
    return costs


def size_title(index: int, session: dict) -> str:
    """'25 % of the corpus (150K target pieces; keep_vocab 210K, extend 180K pieces)'."""
    fractions, plan = session["fractions"] or [], session["plan"]
    share = f"{100 * fractions[index]:g} % of the corpus" if index < len(fractions) else f"training size {index + 1}"
    parts = [f"{size_label(plan['target'][index])} target pieces"] if index < len(plan.get("target", [])) else []
    others = [f"{name} {size_label(sizes[index])}" for name, sizes in plan.items()
              if name != "target" and index < len(sizes)]
    parts += [", ".join(others) + " pieces"] if others else []
    return share + (f" ({'; '.join(parts)})" if parts else "")


def judge(out: Path) -> tuple[dict, dict[int, dict[str, dict]]]:
    """claims.json's content, and the folded rows by size index and arm (``by_size``)."""
    session = read_session(out)
    table, unaligned = by_size(session)
    without = [run_name(sweep, r) for sweep, runs in session["runs"].items() for r in runs if "uk_bpb" not in r]
    stopped = [f"{run_name(sweep, r)} ({', '.join(r['time_stopped'])})" for sweep, runs in session["runs"].items()
               for r in runs if r.get("time_stopped")]
    sizes = []
    for index, arms in table.items():
        fractions = session["fractions"] or []
        sizes.append({"index": index, "title": size_title(index, session),
                      "fraction": fractions[index] if index < len(fractions) else None,
                      "sizes": {name: s[index] for name, s in session["plan"].items() if index < len(s)},
                      "arms": {arm: {"sweep": r["sweep"], "size": r["size"], "seeds": r.get("seeds", 1),
                                     **{k: r.get(k) for key in SHOWN for k in (key, f"{key}_std", f"{key}_n")
                                        if r.get(k) is not None}} for arm, r in arms.items()},
                      "verdicts": {question: versus(arms, rival) for rival, question in RIVALS.items()},
                      "english_cost": english_cost(arms, session["source"]),
                      "not_run": [a for a in ARMS if a not in arms]})
    measured = [{k: s[k] for k in ("index", "title", "verdicts", "english_cost", "not_run")} for s in sizes
                if any(a.get("uk_bpb") is not None for a in s["arms"].values())]
    unigram = {name: {k: u[k] for k in ("bits_per_byte", "bits_per_char", "loss") if k in u}
               for name, u in session["unigram"].items()}
    return {"out": str(out), "read": session["read"], "missing": session["missing"], "notes": session["notes"],
            "fractions": session["fractions"], "plan": session["plan"], "source_text": session["source"],
            "source_text_from": session["source_from"], "unigram": unigram, "without_text": without,
            "unaligned": unaligned, "time_stopped": stopped, "by_size": sizes,
            "headline": measured[-1] if measured else None}, table


def setup_lines(result: dict) -> list[str]:
    lines = ["## Setup", "", f"- read: {', '.join(result['read'])}"]
    lines += [f"- missing: {', '.join(result['missing'])}"] * bool(result["missing"])
    lines += [f"- {note}" for note in result["notes"]]
    if result["source_text"] is None:
        lines.append("- no source_text.json: the source's reference row and every English cost are not measured")
    if result["without_text"]:
        lines.append("- runs without text scores (listed, not judged on bits per byte): "
                     + "; ".join(result["without_text"]))
    if result["unaligned"]:
        lines.append("- runs whose size is not in their sweep's list of sizes.json (left out): "
                     + "; ".join(result["unaligned"]))
    if result["time_stopped"]:
        lines.append("- runs whose time budget ended phases (the phases in brackets): "
                     + "; ".join(result["time_stopped"]))
    return lines + [""]


def size_table(arms: dict[str, dict], result: dict) -> list[str]:
    lines = ["| arm | sweep | uk bits/byte | en bits/byte | English cost | en bits/byte, layers (probe) | "
             "uk pieces/word | test loss (own shards) | steps done | tokens/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for arm, r in arms.items():
        lines.append(f"| {NAMES.get(arm, arm)} | {r['sweep']} | {_cell(r, 'uk_bpb')} | {_cell(r, 'en_bpb')} | "
                     f"{_num(r, 'en_cost', 4, '+')} | {_cell(r, 'en_layers_bpb')} | {_num(r, 'uk_ppw', 2)} | "
                     f"{_pm(r, 'loss', 1.0, 3)} | "
                     f"{_num(r, 'steps_done', 0)} | {_num(r, 'tokens_per_s', 0)} |")
    source = result["source_text"]
    if source:
        uk, en = source.get("uk") or {}, source.get("en") or {}
        lines.append(f"| *source (untouched)* | {result['source_text_from']} | {_num(uk, 'bits_per_byte', 4)} | "
                     f"{_num(en, 'bits_per_byte', 4)} | (reference) | {_num(en, 'bits_per_byte', 4)} | "
                     f"{_num(uk, 'pieces_per_word', 2)} | – | – | – |")
    for name, u in result["unigram"].items():
        if u.get("bits_per_byte") is not None:
            loss = "–" if u.get("loss") is None else f"{u['loss']:.3f}"
            lines.append(f"| *unigram predictor* | {name} | {u['bits_per_byte']:.4f} (on {name}'s test shards) | – "
                         f"| – | – | – | {loss} | – | – |")
    return lines + [""]


TABLE_NOTE = ("Bits per byte are each run's export on the same raw text in its own tokenizer (`text`): they compare "
              "across tokenizers; mean ± std over seeds, n the runs scored. English cost: English bits per byte "
              "minus the untouched source's. English, layers: the probe (`xpt-ds probe`, the sweep's "
              "`--probe-text en`), the run's post-trained layers with the source's own embeddings and head in the "
              "source's tokenizer, without the ITLs where it has them: what the layers kept of English, whatever the "
              "new vocabulary costs ('–' for a run scored without it). The test loss is per piece of each "
              "sweep's own test shards and compares only within one sweep; the unigram rows are the unigram "
              "predictor on each sweep's test shards (unigram.json), not the Ukrainian text of the uk column. "
              "Tokens/s: the run's training tokens over its training process's seconds, start-up, validation and "
              "checkpoints included.")


def verdict_lines(entry: dict, source: dict | None) -> list[str]:
    lines = [f"- **{question}: {v['verdict']}.** {v['text']}" for question, v in entry["verdicts"].items()]
    source_en = ((source or {}).get("en") or {}).get("bits_per_byte")
    lines.append("- **what does each method cost English** (English bits per byte over the untouched source's"
                 + ("" if source_en is None else f" {source_en:.4f}") + "; lower is better):")
    lines += [f"  - {c['text']}" for c in entry["english_cost"].values()]
    if entry["not_run"]:
        lines.append(f"  - not measured (no run at this size): {', '.join(entry['not_run'])}")
    return lines


def write(out: Path) -> dict:
    result, table = judge(out)
    lines = ["# Issue 57: XPT for a decoder (SmolLM2-135M, English -> Ukrainian) against LoRA, vocabulary extension "
             "and continued pretraining, and what each costs English", ""] + setup_lines(result)
    for entry in result["by_size"]:
        lines += [f"## {entry['title']}", ""] + size_table(table[entry["index"]], result)
    lines += [TABLE_NOTE, ""]
    plotted = plot_retention(out, table, result["fractions"], result["source_text"])
    result["plot"] = "plot_retention.png" if plotted else None
    lines += (["![Ukrainian against English bits per byte](plot_retention.png)", "",
               "Ukrainian against English bits per byte (both lower is better): one point per arm and size, larger "
               "for more data, with the seed std as error bars; the star is the untouched source.", ""] if plotted
              else ["No plot: no run has both text scores.", ""])
    lines += ["## Verdicts by size", "",
              "On Ukrainian bits per byte, lower is better. \"XPT\" is the better of `xpt` and `xpt_subword_mean` at "
              "that size. A difference counts only beyond the summed seed spreads; one seed makes no call.", ""]
    for entry in result["by_size"]:
        lines += [f"### {entry['title']}", ""] + verdict_lines(entry, result["source_text"]) + [""]
    head = result["headline"]
    lines += ["## Headline", ""]
    lines += ([f"At {head['title']}, the largest size measured:", ""] + verdict_lines(head, result["source_text"])
              if head else ["Not measured: no run has text scores, nothing to judge on bits per byte."])
    (out / "claims.md").write_text("\n".join(lines) + "\n")
    (out / "claims.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


def plot_retention(out: Path, table: dict[int, dict[str, dict]], fractions: list[float] | None,
                   source: dict | None) -> bool:
    """OUT/plot_retention.png: Ukrainian against English bits per byte, one marker per arm, larger for each larger
    size and labelled with its share; False (and no file) when no arm has both."""
    path = out / "plot_retention.png"
    points = [(arm, i, r) for i, arms in table.items() for arm, r in arms.items()
              if r.get("uk_bpb") is not None and r.get("en_bpb") is not None]
    if not points:
        path.unlink(missing_ok=True)  # an earlier run's plot would show what this one did not measure
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fractions = fractions or []
    fig, ax = plt.subplots(figsize=(8, 6))
    arms = sorted(dict.fromkeys(arm for arm, _, _ in points), key=lambda a: ARMS.index(a) if a in ARMS else len(ARMS))
    for k, arm in enumerate(arms):
        k = ARMS.index(arm) if arm in ARMS else len(ARMS) + k  # an arm keeps its colour and marker in every session
        mine = [(i, r) for a, i, r in points if a == arm]
        colour, marker = f"C{k % 10}", "osD^v<>Phx"[k % 10]
        ax.plot([r["en_bpb"] for _, r in mine], [r["uk_bpb"] for _, r in mine], color=colour, linewidth=0.7,
                alpha=0.5)
        for j, (i, r) in enumerate(mine):
            ax.errorbar(r["en_bpb"], r["uk_bpb"], xerr=r.get("en_bpb_std"), yerr=r.get("uk_bpb_std"), fmt=marker,
                        color=colour, markersize=4 + 3 * i, capsize=2, label=None if j else NAMES.get(arm, arm))
            share = f"{100 * fractions[i]:g}%" if i < len(fractions) else f"size {i + 1}"
            ax.annotate(share, (r["en_bpb"], r["uk_bpb"]), textcoords="offset points", xytext=(5, 4), fontsize=7)
    uk, en = ((source or {}).get("uk") or {}).get("bits_per_byte"), ((source or {}).get("en") or {}).get(
        "bits_per_byte")
    if uk is not None and en is not None:
        ax.plot(en, uk, "k*", markersize=13, label="source (untouched)")
    finish_plot(fig, [ax], "English bits per byte (retention, lower is better)",
                "Ukrainian bits per byte (lower is better)", path)
    return True


@cli_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.decoder.claims", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="the session's OUT (target/, keep_vocab/, extend/)")
    a = p.parse_args(argv)
    if not a.out.is_dir():
        raise UserError(f"--out {a.out}: no such directory (issue 57's session folder)")
    write(a.out)
    print(a.out / "claims.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
