"""The Markdown table of a ``benchmarks/bench_build.py`` result (``OUT/LABEL.json``), which that script prints at
its end; also from the file alone:

    python benchmarks/build_report.py OUT/LABEL.json
"""
from __future__ import annotations

import json
import sys

GIB = 2**30


def _f(x, fmt="{:.1f}") -> str:
    return "" if x is None else fmt.format(x)


def _after(job: dict, seconds) -> str:
    """A resume's or an export's time, or where the cap killed it."""
    if job.get("killed"):
        return f"killed at {job['killed'][1] / GIB:.1f} GiB after {job['wall_s']:.0f} s"
    return _f(seconds)


def table(result: dict) -> str:
    hf = {r["shape"]: r for r in result["hf"]}
    lines = ["| source | ranks | first step ready s | first step done s | vs HF | peak PSS anon/rank to step 1 GiB | "
             "job PSS anon GiB | hand-over s | peak PSS anon/rank hand-over GiB | phase-end save s | resume load s | "
             "export s | export PSS anon GiB |", "|" + "---|" * 13]
    for r in result["rows"]:
        peer = hf.get(r["shape"], {}).get("wall_s")
        if r.get("killed"):
            killed = f"killed at {r['killed_job_anon_gib']:.1f} GiB after {r['killed_after_s']:.0f} s"
            at_kill = " / ".join(_f(v['anon_gib']) for v in r['at_kill']['ranks'].values())
            if r.get("first_step_s") is None:  # in the build: the peak per rank is the one it was killed at
                lines.append(f"| {r['shape']} | {r['world']} | {killed} | | | {at_kill} | | | | | | | |")
            else:  # after its first step: in the hand-over (the last line it logged is phase 1's checkpoint)
                rank_peak = " / ".join(_f(v["anon_gib"]) for v in r["to_first_step"]["ranks"].values())
                lines.append(f"| {r['shape']} | {r['world']} | {_f(r['ready_s'])} | {_f(r['first_step_s'])} | "
                             f"{_f(r['ready_s'] / peer if peer and r['ready_s'] else None, '{:.2f}x')} | {rank_peak} | "
                             f"{_f(r['to_first_step']['job_anon_gib'])} | {killed} | {at_kill} | | | | |")
            continue
        rank_peak = " / ".join(_f(v["anon_gib"]) for v in r["to_first_step"]["ranks"].values())
        hand = " / ".join(_f(v["anon_gib"]) for v in r.get("handover", {}).get("ranks", {}).values())
        method = "" if r.get("method", "xpt") == "xpt" else f", {r['method']}"
        lines.append(f"| {r['shape']} | {r['world']}{'' if r.get('phases', 2) == 2 else ' (phase 1 only)'}{method} | "
                     f"{_f(r['ready_s'])} | {_f(r['first_step_s'])} | "
                     f"{_f(r['ready_s'] / peer if peer and r['ready_s'] else None, '{:.2f}x')} | {rank_peak} | "
                     f"{_f(r['to_first_step']['job_anon_gib'])} | {_f(r.get('handover_s'))} | {hand} | "
                     f"{_f(r.get('phase1_end_save_s'))} | {_after(r['resume'], r['resume'].get('to_resumed_s'))} | "
                     f"{_after(r['export'], r['export']['wall_s'])} | {_f(r['export']['peak']['job_anon_gib'])} |")
    for shape, r in sorted(hf.items()):
        lines.append(f"\nHF from_pretrained + resize_token_embeddings, {shape}: {r['wall_s']:.1f} s wall, peak "
                     f"PSS anon {r['peak']['job_anon_gib']:.1f} GiB (rc {r['rc']})")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(json.loads(open(sys.argv[1]).read())))
