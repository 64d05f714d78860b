"""The ratios and markdown tables of benchmarks/bench_throughput.py's report (BENCHMARKS.md)."""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def add_ratios(rows: list[dict]) -> None:
    """``vs_hf``: an xpt row's tokens/s over the plain hf row's at the same (seq_len, phase); ``vs_hf_same``: an
    xpt variant row's over the hf row with the same variant (--hf-variants); ``vs_plain``: a variant row's over
    the plain row of its side; ``vs_phase2``: phase 1 over phase 2 tokens/s of the same side, variant and seq_len,
    and ``step_vs_phase2`` the step times' ratio (phase 1 / phase 2)."""
    ok = {(r["side"], r.get("variant", ""), r["seq_len"], r["phase"]): r for r in rows if "error" not in r}
    for (side, variant, seq_len, phase), r in ok.items():
        if side == "xpt" and ("hf", "", seq_len, phase) in ok:
            r["vs_hf"] = r["tokens_per_s"] / ok["hf", "", seq_len, phase]["tokens_per_s"]
        if side == "xpt" and variant and ("hf", variant, seq_len, phase) in ok:
            r["vs_hf_same"] = r["tokens_per_s"] / ok["hf", variant, seq_len, phase]["tokens_per_s"]
        if variant and (side, "", seq_len, phase) in ok:
            r["vs_plain"] = r["tokens_per_s"] / ok[side, "", seq_len, phase]["tokens_per_s"]
        if phase == 1 and (side, variant, seq_len, 2) in ok:
            two = ok[side, variant, seq_len, 2]
            r["vs_phase2"] = r["tokens_per_s"] / two["tokens_per_s"]
            r["step_vs_phase2"] = (r["step_ms"] / r["micro_batch"]) / (two["step_ms"] / two["micro_batch"])


def machine(cuda: bool) -> dict:
    import platform
    from importlib.metadata import version

    if cuda:  # torch only here: its import, like deepspeed's and transformers', takes seconds in the parent process
        import torch
        device = torch.cuda.get_device_name()
    else:
        device = f"CPU ({os.cpu_count()} cores, {platform.machine()})"
    return {"device": device, "host": platform.node(), "date": time.strftime("%Y-%m-%d"), "torch": version("torch"),
            "transformers": version("transformers"), "deepspeed": version("deepspeed"),
            "python": platform.python_version()}


def engine_words(a: dict) -> str:
    """What the rows ran on, as the table's header says it: the model and the engine JSON of the plain rows."""
    model = f"decoder {a['decoder']} (benchmarks/throughput_decoder.py)" if a.get("decoder") else "encoder"
    return f"{model}, {'ds_configs/' + a['engine'] + '.json' if a.get('engine') else 'ZeRO-2'}"


def markdown(report: dict) -> str:
    m, a = report["machine"], report["args"]
    lines = [f"Machine: {m['device']}, torch {m['torch']}, transformers {m['transformers']}, deepspeed "
             f"{m['deepspeed']}; {m['date']}. {a['precision']}, {engine_words(a)}, optimizer {report['optimizer']}, "
             f"{a['warmup']} warm-up + {a['steps']} timed steps"
             + (f"; MFU against {report['peak_tflops']:g} TFLOP/s." if report["peak_tflops"] else "."), "",
             "| seq len | micro batch | phase | trainer | tokens/s | step ms | MFU | MFU done | peak mem GiB | "
             "optimizer GiB | vs HF | vs plain | phase-1 step / phase-2 step |",
             "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    name = {"hf": "HF Trainer + DeepSpeed", "xpt": "xpt_ds"}
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f} %"  # noqa: E731
    for r in report["results"]:
        trainer = name[r["side"]] + (f" + {r['variant']}" if r.get("variant") else "")
        head = f"| {r['seq_len']} | {r['micro_batch']} | {r['phase']} | {trainer} |"
        if "error" in r:
            lines.append(f"{head} failed | | | | | | | | |")
            continue
        peer = r["side"] == "hf" and not r.get("variant")
        ratio = f"{r['vs_hf']:.2f}x" if "vs_hf" in r else ("1.0x" if peer else "")
        if "vs_hf_same" in r:
            ratio += f" ({r['vs_hf_same']:.2f}x same engine)"
        plain = f"{r['vs_plain']:.2f}x" if "vs_plain" in r else ""
        vs2 = f"{r['step_vs_phase2']:.2f}" if "step_vs_phase2" in r else ""
        lines.append(f"{head} {r['tokens_per_s']:,.0f} | {r['step_ms']:.1f} | {pct(r['mfu'])} | "
                     f"{pct(r.get('mfu_done'))} | {r['peak_memory_gib']:.2f} | "
                     f"{r.get('optimizer_state_gib', 0):.2f} | {ratio} | {plain} | {vs2} |")
    if report.get("partial"):
        lines.append("\nPartial: the run stopped before its last row (a session's budget, a kill).")
    if report["results"] and report["results"][0].get("memory_kind") == "host_rss":
        lines.append("\nOn CPU: peak memory is the process's peak RSS; MFU is not defined.")
    crowded = crowded_rows(report["results"])
    if crowded:
        lines.append("\nStarted beside other work (not comparable): " + "; ".join(crowded) + ".")
    return "\n".join(lines)


def crowded_rows(rows: list[dict]) -> list[str]:
    """The rows that started while another process computed on the GPU, or while the host's 1-minute load
    average was above half its cores (bench_throughput.machine_busy), each with what was seen."""
    out = []
    for r in rows:
        busy = r.get("busy") or {}
        # the cores of the machine that ran the row (reports from before the field: this machine's)
        half = (busy.get("cpus") or os.cpu_count() or 1) / 2
        seen = [f"GPU: {', '.join(busy['gpu_processes'])}"] if busy.get("gpu_processes") else []
        if busy.get("load_1m", 0) > half:
            seen.append(f"host load {busy['load_1m']:.1f}")
        if seen:
            name = r["side"] + (f" {r['variant']}" if r.get("variant") else "")
            out.append(f"{name} {r['seq_len']} phase {r['phase']} ({'; '.join(seen)})")
    return out


def max_batch_markdown(report: dict) -> str:
    m = report["machine"]
    lines = [f"Machine: {m['device']}, torch {m['torch']}; {m['date']}. Largest micro-batch that ran 2 steps "
             f"({report['args']['precision']}, {engine_words(report['args'])}, optimizer {report['optimizer']}):", "",
             "| seq len | phase | trainer | largest micro-batch | its peak GiB | next size |",
             "|---:|---:|---|---:|---:|---|"]
    name = {"hf": "HF Trainer + DeepSpeed", "xpt": "xpt_ds"}
    for r in report["results"]:
        trainer = name[r["side"]] + (f" + {r['variant']}" if r.get("variant") else "")
        if "error" in r:
            lines.append(f"| {r['seq_len']} | {r['phase']} | {trainer} | failed | | |")
            continue
        fit = [t for t in r["tried"] if t["fits"]]
        peak = f"{fit[-1]['peak_memory_gib']:.1f}" if fit and fit[-1]["peak_memory_gib"] is not None else "n/a"
        nxt = f"{r['tried'][-1]['micro_batch']}: out of memory" if r["ran_out"] else "not tried (list ended)"
        lines.append(f"| {r['seq_len']} | {r['phase']} | {trainer} | {r['largest_fit']} | {peak} | {nxt} |")
    return "\n".join(lines)


def render(report: dict) -> str:
    """A report's markdown: the largest-batch table (``--max-batch``), else the main table with its ratios, which
    this adds to the rows (bench_throughput.py writes them into the report)."""
    if report["args"].get("max_batch"):
        return max_batch_markdown(report)
    add_ratios(report["results"])
    return markdown(report)


def main(argv=None) -> int:
    """Print the markdown of a report bench_throughput.py wrote, finished or stopped mid-table (``partial``)."""
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("report", type=Path, help="the --out JSON of benchmarks/bench_throughput.py")
    path = p.parse_args(argv).report
    report = json.loads(path.read_text())
    if "machine" not in report:  # a partial report from before 2026-11-27 recorded only its rows
        raise SystemExit(f"{path}: no 'machine' entry (a partial report from before bench_throughput.py "
                         "wrote one with its first row)")
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
