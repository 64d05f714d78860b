"""Running a sweep's plan: each run (arm, size, seed) is trained (a child process, through the deepspeed launcher
when ``--nproc`` > 1), scored with ``xpt_ds.cli.evaluate`` and, given fine-tuning files, exported and fine-tuned,
given ``--score-text`` files, exported and scored on them; one row per finished run goes to ``results.jsonl`` as
soon as it finishes (``--drop-weights``: then its checkpoints and export are deleted). A run whose row is there is
not run again; a failed one is recorded with its log and the sweep goes on. ``--parallel K`` keeps K runs going at
once (evaluation and export one at a time, in this process); ``--deadline-minutes`` starts no run after the
deadline."""
from __future__ import annotations

import json
import os
import queue
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from xpt_ds.checkpoint.tags import complete_tags
from xpt_ds.config import ConfigError, load_config, read_checkpoint_config, to_dict
from xpt_ds.io.paths import write_text_atomic
from xpt_ds.sweeps.plan import Plan, Run
from xpt_ds.sweeps.report import size_label
from xpt_ds.sweeps.rows import read_rows, row_key
from xpt_ds.sweeps.scoring import (scoring_diff, downstream, drop_weights, intrinsic, probe_scores, source_text,
                                   source_text_changed, source_text_state, text_scores, unigram, unigram_state)
from xpt_ds.sweeps.stages import Stages, StepFailed, add_seconds, free_name, stop_signal, stop_stages, stopping


def _status(run_dir: Path) -> dict:
    path = run_dir / "status.json"
    return json.loads(path.read_text()) if path.is_file() else {}


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
        aside = free_name(run_dir, ".no_checkpoint")
        run_dir.rename(aside)
        say(f"{run.label}: {run_dir} has no complete checkpoint to resume or score (state "
            f"'{_status(aside).get('state')}'): moved to {aside.name}, training it from the start")
    if _status(run_dir).get("state") == "finished":
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    add_seconds(run_dir, "train", stages.process(plan.train_command(run), run_dir / "train.log", "train"))


def _append_durably(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` and have it on disk before the caller removes it from elsewhere."""
    with open(path, "a") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


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
    if plan.probe_text:
        row["text"].update(probe_scores(plan, run, stages))
    seconds = json.loads((run_dir / "sweep_seconds.json").read_text())
    row.update(train_seconds=round(seconds.get("train", 0.0), 1), wall_seconds=round(sum(seconds.values()), 1),
               nproc=plan.nproc, run_dir=str(run_dir), train_args=shlex.join(plan.train_args(run)),
               config_sha256=plan.config_sha[run.arm], scoring=plan.scoring(run),
               **({"data_sha256": data} if (data := plan.data_sha.get((run.arm, run.size))) else {}))
    return row


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


def _plain(d: dict) -> dict:
    """``d`` as YAML reads it back (tuples as lists)."""
    return yaml.safe_load(yaml.safe_dump(d, sort_keys=False))


class _Sweep:
    """The runs not yet in results.jsonl, ``plan.parallel`` at a time; rows appended as runs finish."""

    def __init__(self, plan: Plan, dry: bool = False):
        self.plan, self.results, self.dry = plan, plan.out / "results.jsonl", dry  # dry: say, change nothing
        self.lock, self.call_lock, self.slots = threading.Lock(), threading.Lock(), queue.Queue()
        self.stdout = sys.stdout  # the stream as the sweep started: _call redirects sys.stdout while it runs
        self.done, self.failures = read_rows(self.results), []  # a damaged whole row is one line, before any write
        self.set_aside_partial_row()
        self.reruns: set = set()  # the runs pending() said it reruns (a dry run's other runs are said after)
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
        todo, unrecorded = [], 0
        for run in self.plan.runs():
            old = self.done.get((run.arm, run.size, run.seed))
            if old is None:
                if self.pending_without_row(run):
                    todo.append(run)
                continue
            # the corpus behind the paths prepared again since (rows record it since 2026-12-04)
            other_data = "data_sha256" in old and old["data_sha256"] != self.plan.data_sha.get((run.arm, run.size))
            changed = other_data or (_settings(old.get("train_args") or ""), old.get("config_sha256")) != (
                _settings(shlex.join(self.plan.train_args(run))), self.plan.config_sha[run.arm]) \
                and not _trains_as_recorded(self.plan, run)
            rescore = "" if changed or "scoring" not in old else scoring_diff(old["scoring"], self.plan.scoring(run))
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
                self.reruns.add((run.arm, run.size, run.seed))
                todo.append(run)
                continue
            self.say(f"skip {run.label}: its row is in {self.results}")
            unrecorded += "data_sha256" not in old
            if other_data:
                self.say(f"warning: {run.label} in {self.results} was trained on another preparation of its data (a "
                         "manifest of data.train_shards or data.valid_shards changed since); --rerun-changed runs it "
                         "again")
            elif changed:
                self.say(f"warning: {run.label} in {self.results} was trained with another config or arguments "
                         f"({old.get('train_args')}); --rerun-changed runs it again")
            elif rescore:
                self.say(f"warning: {run.label} in {self.results} was scored with other test shards, evaluation "
                         f"or fine-tuning ({rescore}); --rerun-changed scores it again, without training it again")
        if unrecorded:
            self.say(f"note: {unrecorded} skipped row(s) of {self.results} record no hash of their data's manifests "
                     "(rows record it since 2026-12-04): a corpus prepared again in place since cannot be told from "
                     "them; remove such a row's line to train it again")
        return todo

    def pending_without_row(self, run: Run) -> bool:
        """Whether ``run``, with no row yet, is to run: a run directory that would be resumed or scored (it holds a
        complete checkpoint) but whose recorded config (RUN_DIR/config.yaml) is not what the run would now train
        with (another --set, a base config changed) is left, with a warning, as a changed run with a row is; with
        ``--rerun-changed`` it moves aside to RUN.superseded and trains from the start. Not resumed, or scored as
        if trained with this config, under the new train_args."""
        run_dir = self.plan.run_dir(run)
        if not complete_tags(run_dir / "checkpoints") or not (run_dir / "config.yaml").is_file() \
                or _trains_as_recorded(self.plan, run):
            return True
        if not self.plan.rerun_changed:
            self.say(f"skip {run.label}: its run directory was trained with another config, with no row yet")
            self.say(f"warning: {run_dir} was trained with another config or arguments than {run.label} now has "
                     "(its config.yaml); it is not resumed or scored as this one: --rerun-changed trains it again")
            return False
        if self.dry:
            self.say(f"would rerun {run.label}: {run_dir} was trained with another config or arguments")
        else:
            self.supersede(run)
        self.reruns.add((run.arm, run.size, run.seed))
        return True

    def supersede(self, run: Run, keep_run: bool = False) -> None:
        """Take ``run``'s rows out of results.jsonl (appended to results.superseded.jsonl first, then the file
        replaced whole) and move its run directory aside to RUN.superseded, so that it trains from the start;
        ``keep_run``: only the scoring changed, so the trained run stays and is scored again. A run with no row
        (trained with another config: ``pending_without_row``) has its run directory moved alone."""
        key = (run.arm, run.size, run.seed)
        rows = ""
        if key in self.done:
            lines = self.results.read_text().splitlines(keepends=True)  # whole rows only (set_aside_partial_row)
            mine = [line for line in lines if line.strip() and row_key(json.loads(line)) == key]
            _append_durably(self.plan.out / "results.superseded.jsonl", "".join(mine))
            write_text_atomic(self.results, "".join(line for line in lines if line not in mine), fsync=True)
            del self.done[key]
            rows = f"its row to {self.plan.out / 'results.superseded.jsonl'}"
        run_dir, moved = self.plan.run_dir(run), ""
        if run_dir.exists() and not keep_run:
            aside = free_name(run_dir, ".superseded")
            run_dir.rename(aside)
            moved = f"{run_dir} to {aside.name}"
        what = "evaluation or fine-tuning" if keep_run else "config or arguments"
        made = "its row was made" if rows else "it was trained"
        self.say(f"{'score again' if keep_run else 'rerun'} {run.label}: {made} with another {what}; "
                 f"moved {' and '.join(m for m in (rows, moved) if m)}")

    def one(self, run: Run) -> None:
        plan = self.plan
        if stopping.is_set():
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

    def reference_unigram(self) -> None:
        """DIR/unigram.json when no run finished in this invocation to score it (every run had its row, or
        ``--unigram`` is new to this sweep): from the first run, in plan order, that holds a complete checkpoint
        (its newest); none (``--drop-weights``, or unpacked without weights) is a warning, as is a unigram.json
        scored with other arguments without ``--rerun-changed``."""
        plan, out = self.plan, self.plan.out / "unigram.json"
        state = unigram_state(plan)
        if state == "changed" and not plan.rerun_changed:
            self.say(_unigram_changed(plan))
            return
        if not state:
            return
        run = next((r for r in plan.runs() if complete_tags(plan.run_dir(r) / "checkpoints")), None)
        if run is None:
            self.say(f"warning: {out} cannot be scored: no run of this sweep holds a checkpoint to read its "
                     "tokenizer and test masks from (--drop-weights, or unpacked without weights)")
            return
        try:
            unigram(plan, run, Stages(plan, 0, self.call_lock), tag_args=[])
            self.say(f"scored the unigram reference with {run.label}'s newest checkpoint -> {out}")
        except StepFailed as e:
            self.say(f"FAILED unigram reference: {e}")
            self.failures.append({"method": "unigram", "size": run.size, "seed": None, "run": "unigram",
                                  "stage": e.stage, "exit": e.code, "log": str(e.log)})


def _unigram_changed(plan: Plan) -> str:
    return (f"warning: {plan.out / 'unigram.json'} was scored with other test shards, evaluation or unigram shards; "
            "--rerun-changed scores it again")


def dry_run(plan: Plan) -> list[Run]:
    """What ``sweep(plan)`` would do, said run by run (skip, rerun, resume, start), with nothing changed: no
    stage starts, no row or run directory moves. The runs it would start, in order."""
    s = _Sweep(plan, dry=True)
    todo = s.pending()
    state = source_text_state(plan)
    if state == "missing" or state == "changed" and plan.rerun_changed:
        s.say(f"would score {plan.text_source} on the --score-text files -> {plan.out / 'source_text.json'}")
    elif state:
        s.say(source_text_changed(plan))
    state, unigram_json = unigram_state(plan), plan.out / "unigram.json"
    if state == "missing" or state == "changed" and plan.rerun_changed:
        s.say(f"would score the unigram reference -> {unigram_json}")
    elif state:
        s.say(_unigram_changed(plan))
    for run in todo:
        if (run.arm, run.size, run.seed) in s.reruns:
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
    stopping.clear()
    s.reference_text()
    if plan.parallel == 1:
        for run in todo:
            s.one(run)
    else:
        pool = ThreadPoolExecutor(plan.parallel)
        try:
            list(pool.map(s.one, todo))
        except BaseException as e:  # Ctrl-C or SIGTERM in the main thread: stop every slot's stage, start no run
            stop_stages(stop_signal(e))
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    if not stopping.is_set():
        s.reference_unigram()
    return s.failures
