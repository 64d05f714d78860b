"""The table ``xpt-ds finetune`` prints from its ``results.json``: test metrics per seed, mean ± std."""
from __future__ import annotations


def format_table(results: dict) -> str:
    """Test metrics ×100, one column per seed, then mean ± std (002 Table 3 style)."""
    seeds = results["seeds"]
    n = sum("diverged" not in r for r in seeds)  # the seeds the summary is over
    head = f"{'test (x100)':<18}" + "".join(f"{'seed ' + str(r['seed']):>11}" for r in seeds) + f"{'mean ± std':>18}"
    lines = [f"{results['config']['task']} · {results['config']['model']} · {len(seeds)} seed(s) · "
             f"test at the {results['selection']}", head]
    fmt = lambda v: "nan" if v is None else f"{100 * v:.2f}"  # noqa: E731
    for name, s in results["summary"].items():
        cells = "".join(f"{'diverged' if 'diverged' in r else fmt(r['test'][name]):>11}" for r in seeds)
        mean = "nan" if s["mean"] is None else f"{fmt(s['mean'])} ± {fmt(s['std'])}" if n > 1 else \
            f"{fmt(s['mean'])} (n=1)"  # one seed has no spread
        lines.append(f"{name:<18}{cells}{mean:>18}")
    for r in seeds:
        if "diverged_after" in r:
            lines.append(f"seed {r['seed']} diverged in {r['diverged_after']}; scored at its best valid epoch "
                         f"{r['epoch']}, before it")
    if "majority_baseline" in results:
        m = results["majority_baseline"]
        line = f"majority class '{m['label']}' accuracy on test: {fmt(m['accuracy'])} (the best one-class guess)"
        t = results.get("train_majority")
        if t and t["label"] != m["label"]:
            line += f"; the training set's majority '{t['label']}': {fmt(t['accuracy'])}"
        lines.append(line)
    if any(results.get("dropped", {}).values()):
        lines.append("dropped (entity markers farther apart than max_length): " +
                     ", ".join(f"{k} {v}" for k, v in results["dropped"].items()))
    return "\n".join(lines)
