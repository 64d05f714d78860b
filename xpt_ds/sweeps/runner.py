"""Running a sweep's plan: each run (arm, size, seed) is trained (a child process, through the deepspeed launcher
when ``--nproc`` > 1), scored with ``xpt_ds.cli.evaluate`` and, given fine-tuning files, exported and fine-tuned,
given ``--score-text`` files, exported and scored on them; one row per finished run goes to ``results.jsonl`` as
soon as it finishes (``--drop-weights``: then its checkpoints and export are deleted). A run whose row is there is
not run again; a failed one is recorded with its log and the sweep goes on. ``--parallel K`` keeps K runs going at
once (evaluation and export one at a time, in this process); ``--deadline-minutes`` starts no run after the
deadline."""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import queue
import shlex
import shutil
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import yaml

from xpt_ds.checkpoint.store import complete_tags
from xpt_ds.config import ConfigError, load_config, read_checkpoint_config, to_dict
from xpt_ds.errors import INTERRUPTED_EXIT_CODE
from xpt_ds.io.paths import write_text_atomic
from xpt_ds.sweeps.plan import Plan, Run
from xpt_ds.sweeps.report import size_label
from xpt_ds.sweeps.rows import INTRINSIC_KEYS, OPTIONAL_KEYS, downstream_row, read_json, read_rows, row_key, text_row


class StepFailed(Exception):
    def __init__(self, stage: str, code: int, log: Path):
        super().__init__(f"{stage} exited {code}; log: {log}")
        self.stage, self.code, self.log = stage, code, log


class Interrupted(Exception):
    """The sweep is being stopped (``stop_stages``): no stage starts any more."""


_live: set[subprocess.Popen] = set()  # the stage processes running now, in every --parallel slot
_live_lock = threading.Lock()
_stopping = threading.Event()


def stop_stages(grace_s: float = 300.0) -> None:
    """Stop every stage process still running and start no more: SIGTERM, on which a training run checkpoints and
    exits (``xpt_ds.runtime.preemption``), then SIGKILL for what is still there after ``grace_s``. A sweep
    stopped by Ctrl-C or ``kill`` calls it, so that no training run goes on without it."""
    _stopping.set()
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        proc.terminate()
    deadline = time.time() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _run(cmd: list[str], log: Path, stage: str, env: dict | None = None) -> float:
    """Run one stage as a process, appending its output to ``log``; its wall seconds, or StepFailed (Interrupted
    once the sweep is being stopped: the stage did not start, or was stopped)."""
    started = time.time()
    with open(log, "a") as f:
        f.write(f"$ {shlex.join(cmd)}\n")
        f.flush()
        with _live_lock:
            if _stopping.is_set():
                raise Interrupted(stage)
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
            _live.add(proc)
        try:
            code = proc.wait()
        except BaseException:  # Ctrl-C or the sweep's SIGTERM in this thread: stop the stage too
            stop_stages()
            raise
        finally:
            with _live_lock:
                _live.discard(proc)
    if _stopping.is_set():
        raise Interrupted(stage)
    if code != 0:
        raise StepFailed(stage, code, log)
    return time.time() - started


def _call(module: str, argv: list[str], log: Path, stage: str) -> float:
    """Run ``python -m MODULE ARGV`` in this process (saves a start-up of torch, transformers and DeepSpeed per
    run), appending its output to ``log``; its wall seconds, or StepFailed."""
    started = time.time()
    entry = importlib.import_module(module).main  # outside the redirect: loggers made at import keep sys.stdout
    with open(log, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print(f"$ python -m {module} {shlex.join(argv)}", flush=True)
        try:
            code = entry(argv)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
        except Exception:  # one broken run must not end the sweep
            traceback.print_exc()
            code = 1
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # the next run's training processes need the memory
    if code == INTERRUPTED_EXIT_CODE:  # a Ctrl-C that reached the tool (errors.cli_errors) stops the sweep
        stop_stages()
        raise Interrupted(stage)
    if code:
        raise StepFailed(stage, code, log)
    return time.time() - started


class Stages:
    """How one run's stages execute. Training and fine-tuning are child processes, with the run slot's GPU under
    ``--parallel`` when there are several. Evaluation and export run in this process (saving a start-up of torch,
    transformers and DeepSpeed each), one at a time: ``call_lock`` is held while ``_call`` redirects this
    process's output into the run's log, so under ``--parallel`` the other threads print to the stream the sweep
    started with (``_Sweep.stdout``), never to a redirected one."""

    def __init__(self, plan: Plan, slot: int = 0, call_lock: threading.Lock | None = None):
        self.env, self.call_lock = None, call_lock or contextlib.nullcontext()
        if plan.parallel > 1:
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count > 1 and "CUDA_VISIBLE_DEVICES" not in os.environ:
                self.env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(slot % count)}

    def process(self, cmd: list[str], log: Path, stage: str) -> float:
        return _run(cmd, log, stage, self.env)

    def module(self, module: str, argv: list[str], log: Path, stage: str) -> float:
        with self.call_lock:
            return _call(module, argv, log, stage)


def _status(run_dir: Path) -> dict:
    path = run_dir / "status.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _add_seconds(run_dir: Path, stage: str, seconds: float) -> None:
    """Per-stage wall seconds, summed over sweep invocations (an interrupted run resumes and adds)."""
    path = run_dir / "sweep_seconds.json"
    times = json.loads(path.read_text()) if path.is_file() else {}
    times[stage] = times.get(stage, 0.0) + seconds
    path.write_text(json.dumps(times) + "\n")


def _started_without_checkpoint(run_dir: Path) -> bool:
    """Its training started (status.json) but left no complete checkpoint: ``train`` sets it aside."""
    return (run_dir / "status.json").is_file() and not complete_tags(run_dir / "checkpoints")


def train(plan: Plan, run: Run, stages: Stages, say=print) -> None:
    """Train the run, or resume it from its newest complete checkpoint. A run directory whose training started
    but holds no complete checkpoint (copied without its weights, as a GPU session's results.tgz is unpacked
    on another machine, or stopped before its first save) cannot be resumed or scored: it is moved aside whole,
    so no file of it (status, best.json, scores, fine-tuning results, TensorBoard events) mixes with the new
    run, and the run starts over."""
    run_dir = plan.run_dir(run)
    if _started_without_checkpoint(run_dir):
        aside = _free_name(run_dir, ".no_checkpoint")
        run_dir.rename(aside)
        say(f"{run.label}: {run_dir} has no complete checkpoint to resume or score (state "
            f"'{_status(aside).get('state')}'): moved to {aside.name}, training it from the start")
    if _status(run_dir).get("state") == "finished":
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    _add_seconds(run_dir, "train", stages.process(plan.train_command(run), run_dir / "train.log", "train"))


def _append_durably(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` and have it on disk before the caller removes it from elsewhere."""
    with open(path, "a") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _free_name(path: Path, suffix: str) -> Path:
    """``path`` + ``suffix``, or + ``suffix-2``, ``-3``... : the first that does not exist."""
    candidate, n = path.with_name(path.name + suffix), 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}{suffix}-{n}")
    return candidate


def intrinsic(plan: Plan, run: Run, stages: Stages) -> dict:
    run_dir = plan.run_dir(run)
    out = run_dir / "eval.json"
    argv = ["--run", str(run_dir), *plan.tag_args(run), "--shards", *plan.test_shards, *plan.evaluate_args,
            "--out", str(out)]
    _add_seconds(run_dir, "evaluate", stages.module("xpt_ds.cli.evaluate", argv, run_dir / "evaluate.log", "evaluate"))
    result = json.loads(out.read_text())
    return {**{k: result[k] for k in INTRINSIC_KEYS}, **{k: result[k] for k in OPTIONAL_KEYS if k in result},
            **({"objective": result["objective"]} if "objective" in result else {}),  # a decoder's: next_token
            "eval_tokens": result["tokens"], "checkpoint": result["tag"]}


def export_run(plan: Plan, run: Run, stages: Stages, log: Path) -> float:
    """``xpt_ds.cli.export`` of the checkpoint the run is scored from (its best under checkpoint.keep_best) to
    RUN_DIR/export, in place of one there; its seconds."""
    run_dir = plan.run_dir(run)
    shutil.rmtree(run_dir / "export", ignore_errors=True)
    argv = ["--run", str(run_dir), *plan.tag_args(run), "--out", str(run_dir / "export")]
    return stages.module("xpt_ds.cli.export", argv, log, "export")


def downstream(plan: Plan, run: Run, stages: Stages) -> tuple[dict, bool]:
    """Export, fine-tune on every seed, and the headline metric's mean ± std; and whether it exported (the text
    scores then read that export). A fine-tuning already there is kept when it was run with this sweep's
    fine-tuning arguments (``finetune/sweep_args.json``; one from before 2026-11-28 has none and is kept); with
    others it moves to ``finetune.superseded`` and runs again."""
    run_dir = plan.run_dir(run)
    results, recorded = run_dir / "finetune" / "results.json", run_dir / "finetune" / "sweep_args.json"
    if results.is_file() and recorded.is_file() and json.loads(recorded.read_text()) != plan.finetune_args:
        results.parent.rename(_free_name(results.parent, ".superseded"))  # other files or flags: fine-tune again
    exported = not results.is_file()
    if exported:
        log = run_dir / "finetune.log"
        seconds = export_run(plan, run, stages, log)
        seconds += stages.process([sys.executable, "-m", "xpt_ds.cli.finetune", "--model", str(run_dir / "export"),
                                   "--out", str(results.parent), *plan.finetune_args], log, "finetune")
        recorded.write_text(json.dumps(plan.finetune_args) + "\n")
        _add_seconds(run_dir, "finetune", seconds)
    return downstream_row(json.loads(results.read_text())), exported


def text_scores(plan: Plan, run: Run, stages: Stages, exported: bool) -> dict:
    """``--score-text``: the run's export (made now, unless ``downstream`` made it for this row) scored on each
    text file by ``xpt_ds.cli.evaluate --text`` into RUN_DIR/text_LABEL.json, at evaluate's default --seq-len
    (the model's positions: an export has its source's, so the source and every run read the same windows);
    the row's ``text``: {label: bits per byte, pieces per word, tokens, bytes}. Output in RUN_DIR/text.log,
    seconds (export included) under "text" in sweep_seconds.json."""
    run_dir = plan.run_dir(run)
    log = run_dir / "text.log"
    seconds = 0.0 if exported else export_run(plan, run, stages, log)
    text = {}
    for label, spec in plan.score_text.items():
        out = run_dir / f"text_{label}.json"
        argv = ["--model", str(run_dir / "export"), *plan.text_args, "--text", spec["file"], "--out", str(out)]
        seconds += stages.module("xpt_ds.cli.evaluate", argv, log, "text")
        text[label] = text_row(read_json(out))
    _add_seconds(run_dir, "text", seconds)
    return {"text": text}


def run_one(plan: Plan, run: Run, stages: Stages, say=print) -> dict:
    """Train, evaluate and (optionally) fine-tune one run; its results.jsonl row."""
    run_dir = plan.run_dir(run)
    train(plan, run, stages, say)
    key = (run.arm, run.size)
    row = {"method": run.arm, "base_method": plan.arms[run.arm], "size": run.size, "size_label": size_label(run.size),
           "seed": run.seed, "steps": plan.steps[key]}
    status, seq_len = _status(run_dir), plan.seq_len[key]
    tokens_seen = status.get("target_tokens_seen", status.get("tokens_seen", 0))  # target MLM rows (TreLM has more)
    row["epochs"] = tokens_seen * (seq_len - 2) / seq_len / run.size  # a packed sequence is cls + body + sep
    row["tokens_seen"] = tokens_seen  # over train_seconds: the run's training tokens per second
    row["steps_done"] = status.get("global_step")
    row["time_stopped"] = status.get("time_stopped") or []  # phases guard.max_train_minutes ended
    best = run_dir / "best.json"
    if best.is_file():
        row["best"] = json.loads(best.read_text())
    row.update(intrinsic(plan, run, stages))
    exported = False
    if plan.finetune_args is not None and run.size in plan.finetune_sizes:
        scores, exported = downstream(plan, run, stages)
        row.update(scores)
    if plan.score_text:
        row.update(text_scores(plan, run, stages, exported))
    seconds = json.loads((run_dir / "sweep_seconds.json").read_text())
    row.update(train_seconds=round(seconds.get("train", 0.0), 1), wall_seconds=round(sum(seconds.values()), 1),
               nproc=plan.nproc, run_dir=str(run_dir), train_args=shlex.join(plan.train_args(run)),
               config_sha256=plan.config_sha[run.arm], scoring=plan.scoring(run))
    return row


def unigram(plan: Plan, run: Run, stages: Stages) -> None:
    """DIR/unigram.json: the unigram predictor of ``plan.unigram_shards`` on the sweep's test masks (the masks
    and vocabulary of the first finished run; every arm of a sweep shares the tokenizer)."""
    out, record = plan.out / "unigram.json", plan.out / "unigram.args.json"
    if not plan.unigram_shards:
        return
    now = {"test_shards": plan.test_shards, "evaluate_args": plan.evaluate_args, "unigram": plan.unigram_shards}
    if out.is_file():
        if record.is_file():
            same = json.loads(record.read_text()) == now
        else:  # scored before 2026-11-28: its own JSON names the shards
            old = json.loads(out.read_text())
            same = (old.get("shards"), old.get("unigram")) == (plan.test_shards, plan.unigram_shards)
        if same or not plan.rerun_changed:  # as the rows: scored otherwise, it is scored again on request only
            return
        out.rename(_free_name(out, ".superseded"))
    argv = ["--run", str(plan.run_dir(run)), *plan.tag_args(run), "--shards", *plan.test_shards,
            *plan.evaluate_args, "--unigram", *plan.unigram_shards, "--out", str(out)]
    stages.module("xpt_ds.cli.evaluate", argv, plan.out / "unigram.log", "unigram")
    record.write_text(json.dumps(now) + "\n")


def _source_text_args(plan: Plan) -> dict:
    """What DIR/source_text.json is scored with (DIR/source_text.args.json records it): the source, the files
    and their hashes, evaluate's arguments."""
    return {"source": plan.text_source, "score_text": plan.score_text, "text_args": plan.text_args}


def source_text_state(plan: Plan) -> str:
    """'' (nothing to score: no --score-text, or source_text.json scored with these arguments), 'missing', or
    'changed' (scored with another source, other text under a label (by content, wherever the file is) or other
    arguments)."""
    out, record = plan.out / "source_text.json", plan.out / "source_text.args.json"
    if not plan.score_text:
        return ""
    if not out.is_file():
        return "missing"
    if not record.is_file():
        return "changed"
    old, now = read_json(record), _source_text_args(plan)
    same = old.get("source") == now["source"] and old.get("text_args") == now["text_args"] and \
        _text_content(old.get("score_text")) == _text_content(now["score_text"])
    return "" if same else "changed"


def source_text(plan: Plan, stages: Stages, say=print) -> None:
    """DIR/source_text.json: {label: xpt_ds.cli.evaluate --text's figures} of the source itself on the
    ``--score-text`` files, the reference beside every run's (what adapting it cost each text), scored in one
    evaluate (the source loads once: a GGUF is dequantized), output in DIR/source_text.log. As unigram.json:
    scored with other arguments, it is scored again on request only (``--rerun-changed``), else kept and said."""
    state = source_text_state(plan)
    if not state:
        return
    out = plan.out / "source_text.json"
    if state == "changed":
        if not plan.rerun_changed:
            say(f"warning: {out} was scored with another source or other text files; --rerun-changed scores it "
                "again")
            return
        out.rename(_free_name(out, ".superseded"))
    scored = plan.out / "source_text.evaluate.json"
    files = [spec["file"] for spec in plan.score_text.values()]
    stages.module("xpt_ds.cli.evaluate", ["--model", plan.text_source, *plan.text_args, "--text", *files,
                                          "--out", str(scored)], plan.out / "source_text.log", "source text")
    figures = read_json(scored)["text"]  # keyed by str(Path(file)), as evaluate names each file
    write_text_atomic(out, json.dumps({label: figures[str(Path(f))] for label, f in zip(plan.score_text, files)},
                                      indent=1) + "\n")
    scored.unlink()
    (plan.out / "source_text.args.json").write_text(json.dumps(_source_text_args(plan)) + "\n")


def drop_weights(run_dir: Path) -> list[str]:
    """``--drop-weights``, once the run's row is written: delete RUN_DIR/checkpoints (every tag, the kept phase
    ends, abandoned branches, universal conversions: ``xpt_ds.checkpoint.store``) and RUN_DIR/export, the run's
    only weights; what was there of the two. Everything else stays: status.json, best.json, config.yaml, the
    scores (eval.json, text_*.json, finetune/), logs, metrics and TensorBoard events. Such a run, resumed later,
    has no checkpoint: ``train`` sets it aside and trains it from the start."""
    dropped = []
    for name in ("checkpoints", "export"):
        if (run_dir / name).exists():
            shutil.rmtree(run_dir / name)
            dropped.append(name)
    return dropped


def _settings(train_args: str) -> list[str]:
    """A run's training arguments less where the sweep folder is (``--config OUT/configs/ARM.yaml``, whose
    content ``config_sha256`` compares, and ``--run_dir``), so a sweep moved or unpacked elsewhere still matches."""
    args = shlex.split(train_args)
    return [a for i, a in enumerate(args)
            if a != "--config" and (i == 0 or args[i - 1] != "--config") and not a.startswith("--run_dir=")]


def _trains_as_recorded(plan: Plan, run: Run) -> bool:
    """Whether ``run`` would train with the config its run directory recorded (RUN_DIR/config.yaml, the trainer's
    resolved config), ``run_dir`` aside: the arm's config file under this sweep's arguments, resolved. A row whose
    config file or arguments read differently but resolve to the same training (a base rewritten, a default now
    also given by --set) is not changed."""
    args = plan.train_args(run)
    try:
        recorded = yaml.safe_load((plan.run_dir(run) / "config.yaml").read_text())
        if not isinstance(recorded, dict):
            return False
        # Resolved as a checkpoint's config is: a key added to the config tree since the run is at its default
        # on both sides, and a renamed key under its new name.
        recorded = _plain(to_dict(read_checkpoint_config(recorded)))
        now = _plain(to_dict(load_config(args[1], args[2:])))
    except (OSError, yaml.YAMLError, ConfigError):
        return False
    recorded.pop("run_dir", None)
    now.pop("run_dir", None)
    return recorded == now


def _scoring_keys(now: dict) -> list[str]:
    """What a rerun compares of a row's scoring (rows record it since 2026-11-28): the test shards and the
    evaluation arguments, the fine-tuning arguments when this invocation fine-tunes and the text files
    (``score_text``, recorded since 2026-11-29) when it scores text; left out, the row keeps its fine-tuning or its
    text scores, and a row from before either has none, which differs from any given."""
    return ["test_shards", "evaluate_args"] + [k for k in ("finetune_args", "score_text") if now.get(k) is not None]


def _scoring_diff(old: dict, now: dict) -> str:
    """What differs between a row's recorded scoring and this invocation's; empty when nothing does. The text
    files compare by label and content (``_text_content``), not by where they are."""
    def seen(k: str, scoring: dict):
        return _text_content(scoring.get(k)) if k == "score_text" else scoring.get(k)
    return "; ".join(f"{k} {old.get(k)} -> {now[k]}" for k in _scoring_keys(now) if seen(k, old) != seen(k, now))


def _text_content(score_text: dict | None) -> dict | None:
    """``--score-text``'s record as what it scores: label -> the file's hash, wherever the file is (a session
    unpacked elsewhere, or a rehearsal whose texts are copies in its own folder, scores the same text)."""
    if not isinstance(score_text, dict):
        return score_text
    return {label: (spec or {}).get("sha256") for label, spec in score_text.items()}


def _plain(d: dict) -> dict:
    """``d`` as YAML reads it back (tuples as lists)."""
    return yaml.safe_load(yaml.safe_dump(d, sort_keys=False))


class _Sweep:
    """The runs not yet in results.jsonl, ``plan.parallel`` at a time; rows appended as runs finish."""

    def __init__(self, plan: Plan, dry: bool = False):
        self.plan, self.results, self.dry = plan, plan.out / "results.jsonl", dry  # dry: say, change nothing
        self.lock, self.call_lock, self.slots = threading.Lock(), threading.Lock(), queue.Queue()
        self.stdout = sys.stdout  # the stream as the sweep started: _call redirects sys.stdout while it runs
        self.set_aside_partial_row()
        self.done, self.failures = read_rows(self.results), []
        for slot in range(plan.parallel):
            self.slots.put(slot)

    def set_aside_partial_row(self) -> None:
        """A results.jsonl whose last line has no newline (a row cut short, by a full disk or a crash while it was
        written) would have the next row appended onto that line: the tail goes to results.partial.txt (kept)
        and the file is cut back to its last complete row, before this sweep appends anything."""
        data = self.results.read_bytes() if self.results.is_file() else b""
        if not data or data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        if self.dry:
            self.say(f"would cut {self.results} back to its last whole row ({len(data) - keep} bytes to "
                     "results.partial.txt)")
            return
        _append_durably(self.plan.out / "results.partial.txt", data[keep:].decode(errors="replace") + "\n")
        write_text_atomic(self.results, data[:keep].decode(), fsync=True)
        self.say(f"{self.results}: its last line ({len(data) - keep} bytes) was not a whole row; moved it to "
                 f"{self.plan.out / 'results.partial.txt'}")

    def say(self, text: str) -> None:
        with self.lock:
            print(text, file=self.stdout, flush=True)

    def pending(self) -> list[Run]:
        todo = []
        for run in self.plan.runs():
            old = self.done.get((run.arm, run.size, run.seed))
            if old is None:
                todo.append(run)
                continue
            changed = (_settings(old.get("train_args") or ""), old.get("config_sha256")) != (
                _settings(shlex.join(self.plan.train_args(run))), self.plan.config_sha[run.arm]) \
                and not _trains_as_recorded(self.plan, run)
            rescore = "" if changed or "scoring" not in old else _scoring_diff(old["scoring"], self.plan.scoring(run))
            if rescore and not complete_tags(self.plan.run_dir(run) / "checkpoints"):
                self.say(f"skip {run.label}: its row is in {self.results}")
                self.say(f"warning: {run.label} in {self.results} was scored with other test shards, evaluation or "
                         f"fine-tuning ({rescore}), and its run directory holds no complete checkpoint to score again "
                         "(unpacked without weights, or --drop-weights?)")
                continue
            if (changed or rescore) and self.plan.rerun_changed:
                if self.dry:
                    self.say(f"would {'rerun' if changed else 'score again'} {run.label}: its row was made with "
                             f"another {'config or arguments' if changed else 'evaluation or fine-tuning'}")
                else:
                    self.supersede(run, keep_run=bool(rescore))
                todo.append(run)
                continue
            self.say(f"skip {run.label}: its row is in {self.results}")
            if changed:
                self.say(f"warning: {run.label} in {self.results} was trained with another config or arguments "
                         f"({old.get('train_args')}); --rerun-changed runs it again")
            elif rescore:
                self.say(f"warning: {run.label} in {self.results} was scored with other test shards, evaluation "
                         f"or fine-tuning ({rescore}); --rerun-changed scores it again, without training it again")
        return todo

    def supersede(self, run: Run, keep_run: bool = False) -> None:
        """Take ``run``'s rows out of results.jsonl (appended to results.superseded.jsonl first, then the file
        replaced whole) and move its run directory aside to RUN.superseded, so that it trains from the start;
        ``keep_run``: only the scoring changed, so the trained run stays and is scored again."""
        key = (run.arm, run.size, run.seed)
        lines = self.results.read_text().splitlines(keepends=True)  # whole rows only (set_aside_partial_row)
        mine = [line for line in lines if line.strip() and row_key(json.loads(line)) == key]
        _append_durably(self.plan.out / "results.superseded.jsonl", "".join(mine))
        write_text_atomic(self.results, "".join(line for line in lines if line not in mine), fsync=True)
        del self.done[key]
        run_dir, moved = self.plan.run_dir(run), ""
        if run_dir.exists() and not keep_run:
            aside = _free_name(run_dir, ".superseded")
            run_dir.rename(aside)
            moved = f" and {run_dir} to {aside.name}"
        what = "evaluation or fine-tuning" if keep_run else "config or arguments"
        self.say(f"{'score again' if keep_run else 'rerun'} {run.label}: its row was made with another {what}; "
                 f"moved it to {self.plan.out / 'results.superseded.jsonl'}{moved}")

    def one(self, run: Run) -> None:
        plan = self.plan
        if _stopping.is_set():
            return
        if plan.deadline is not None and time.time() > plan.deadline:
            self.say(f"not started {run.label}: past the deadline")
            return
        slot = self.slots.get()
        try:
            self.say(f"{_next_step(plan, run)} -> {plan.run_dir(run)}")
            stages = Stages(plan, slot, self.call_lock)
            row = run_one(plan, run, stages, self.say)
        except StepFailed as e:
            self.say(f"FAILED {run.label}: {e}")
            with self.lock:
                self.failures.append({"method": run.arm, "size": run.size, "seed": run.seed, "run": run.label,
                                      "stage": e.stage, "exit": e.code, "log": str(e.log)})
            return
        finally:
            self.slots.put(slot)
        with self.lock:
            with open(self.results, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"done {run.label}: ppl {row['ppl']:.2f}, mrr {row['mrr']:.4f} in {row['wall_seconds']:.0f} s",
                  file=self.stdout, flush=True)
        try:
            with self.lock:  # the first run to finish scores it; the others find unigram.json
                unigram(plan, run, stages)
        except StepFailed as e:
            self.say(f"FAILED unigram reference: {e}")
            with self.lock:
                self.failures.append({"method": "unigram", "size": run.size, "seed": None, "run": "unigram",
                                      "stage": e.stage, "exit": e.code, "log": str(e.log)})
        if plan.drop_weights:  # after unigram, which reads the first finished run's checkpoint
            dropped = drop_weights(plan.run_dir(run))
            if dropped:
                self.say(f"dropped {run.label}'s {' and '.join(dropped)} (--drop-weights)")

    def reference_text(self) -> None:
        """DIR/source_text.json (``source_text``), before the runs; a failure is reported as a run's is and the
        sweep goes on."""
        try:
            source_text(self.plan, Stages(self.plan, 0, self.call_lock), self.say)
        except StepFailed as e:
            self.say(f"FAILED source text reference: {e}")
            self.failures.append({"method": "source", "size": None, "seed": None, "run": "source text",
                                  "stage": e.stage, "exit": e.code, "log": str(e.log)})


def dry_run(plan: Plan) -> list[Run]:
    """What ``sweep(plan)`` would do, said run by run (skip, rerun, resume, start), with nothing changed: no
    stage starts, no row or run directory moves. The runs it would start, in order."""
    s = _Sweep(plan, dry=True)
    todo = s.pending()
    state = source_text_state(plan)
    if state == "missing" or state == "changed" and plan.rerun_changed:
        s.say(f"would score {plan.text_source} on the --score-text files -> {plan.out / 'source_text.json'}")
    elif state:
        s.say(f"warning: {plan.out / 'source_text.json'} was scored with another source or other text files; "
              "--rerun-changed scores it again")
    rerun = {(r.arm, r.size, r.seed) for r in todo} & set(s.done)
    for run in todo:
        if (run.arm, run.size, run.seed) in rerun:
            continue  # said by pending
        s.say(f"would {_next_step(plan, run)}")
    return todo


def _next_step(plan: Plan, run: Run) -> str:
    """What the sweep does next with ``run`` (not a rerun), as its line says it: start over, score, resume or run."""
    run_dir = plan.run_dir(run)
    if _started_without_checkpoint(run_dir):
        return (f"start {run.label} over: {run_dir} has no complete checkpoint (it moves to "
                f"{run_dir.name}.no_checkpoint)")
    if _status(run_dir).get("state") == "finished":
        return f"score {run.label}: trained, with no row yet"
    tags = complete_tags(run_dir / "checkpoints")
    if tags:
        return f"resume {run.label} from {tags[-1]}"
    return f"run {run.label}: {plan.steps[run.arm, run.size]} steps on {run.size:,} tokens"


def sweep(plan: Plan) -> list[dict]:
    """Every run not yet in results.jsonl, smallest size first; the failures."""
    s = _Sweep(plan)
    todo = s.pending()
    _stopping.clear()
    s.reference_text()
    if plan.parallel == 1:
        for run in todo:
            s.one(run)
        return s.failures
    pool = ThreadPoolExecutor(plan.parallel)
    try:
        list(pool.map(s.one, todo))
    except BaseException:  # Ctrl-C or SIGTERM in the main thread: stop the other slots' stages, start no run
        stop_stages()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return s.failures
