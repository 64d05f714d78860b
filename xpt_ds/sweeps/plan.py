"""A sweep's plan, checked before the first run starts: every (method, size) run's config and command, the
``--set`` overrides that apply to it, its step count, and the evaluation, fine-tuning and text-scoring
arguments."""
from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from xpt_ds.config import ConfigError, load_config, read_config_file
from xpt_ds.config.methods import METHODS, Method
from xpt_ds.errors import first_line
from xpt_ds.finetuning.config import FinetuneConfig
from xpt_ds.runtime.ports import free_port
from xpt_ds.sweeps.data_identity import manifests_sha
from xpt_ds.sweeps.report import parse_size, size_label
from xpt_ds.sweeps.rows import PROBE_SUFFIX

SET_BY_SWEEP = ("run_dir", "model.method", "data.train_tokens")
SET_BY_SEEDS = ("--model.init_seed=", "--seed=", "--data.seed=")  # a replicate's seeds (Plan.train_args)
# trust_remote_code: the sweep fine-tunes only its own exports, whose code (if any) is xpt-ds's own.
FINETUNE_SET_BY_SWEEP = ("model", "out", "trust_remote_code")
TEXT_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # --score-text LABEL: a column head and RUN_DIR/text_LABEL.json


def method_config(base: dict, method: str) -> dict:
    """The base config for ``method``. The base's phases stay as written when they suit the method; otherwise
    the method's preset schedule (``Method.schedule``) is written over the base's total steps:

    - a graph method (trelm: ``Method.graph``) on a base whose phases are no phase graph, or a graph written for
      another method's graph, gets its graph: each phase's schedule (steps, lr, warmup, decay) from the base
      phase at the same index when the counts match, else the total steps split by the graph's shares and the
      lr, decay and (at most the phase's steps) warmup of the base phase that trains the same kind of weights
      (``schedule_source``);
    - a method without a graph on a phase graph written for a graph method, or whose phases leave trainable
      to the presets, gets its presets the same way;
    - a one-phase method (xpt_sp, adapters, scratch) on a multi-phase base whose phases use the presets gets one
      phase of the total steps, named as the base's first, with the schedule of ``schedule_source``: Adapters
      (new parameters only) the base's first phase's, Scratch and XPT-SP (every weight) its last phase's, the
      lr the base gives every weight.

    Every method trains the same number of (global) steps. The English and parallel data keys go when no phase
    of the method reads them (a non-trelm method on a TreLM base), and so does the base's ``embedding_init`` for a
    method that has no new rows to start from the source (Scratch takes nothing from it, keep_vocab keeps its
    rows), and ``model.adapter_size`` / ``model.lora`` for a method other than adapters / lora: ``--set
    ARM:model.embedding_init=...`` still reaches the method's own check."""
    cfg = copy.deepcopy(base)
    phases = cfg.get("phases") or []
    m, base_m = METHODS[method], METHODS.get((cfg.get("model") or {}).get("method") or "xpt")
    graph = any(p.get("start_from") or p.get("merge") for p in phases)
    written_for_graph = graph and base_m is not None and bool(base_m.graph)
    if m.graph and (not graph or (written_for_graph and base_m.graph != m.graph)):
        cfg["phases"] = preset_phases(m, phases)
    elif not m.graph and graph and (written_for_graph or not any(p.get("trainable") for p in phases)):
        cfg["phases"] = preset_phases(m, phases)
    elif m.phases == 1 < len(phases) and not any(p.get("trainable") for p in phases):
        steps, src = sum(int(p.get("steps", 0)) for p in phases), schedule_source(m, 0, phases)
        phase = {**phases[0], "steps": steps, **_schedule(src, steps)}  # the first phase's keys, in its order
        cfg["phases"] = [{k: v for k, v in phase.items() if k not in SCHEDULE or k in src}]
    _drop_unread_data(cfg, m)
    model = cfg.setdefault("model", {})
    if m.source == "none" or m.vocab == "source":
        model.pop("embedding_init", None)
        model.pop("embedding_init_args", None)
    for key, reads in (("adapter_size", m.adapters), ("lora", m.lora)):  # another arm's settings
        if not reads:
            model.pop(key, None)
    model["method"] = method
    return cfg


SCHEDULE = ("lr", "warmup_steps", "decay", "min_lr_ratio")  # what a phase takes from the base phase it follows


def trains_reused(m: Method, index: int) -> bool:
    """Whether phase ``index`` of ``m.schedule`` trains weights the model reuses (or, for Scratch, every
    weight): not for Adapters or LoRA (the source stays as copied), a preset of new parameters only (XPT's
    phase 1: ``@new``) or a graph phase that leaves the encoder out (TreLM's commonality phase)."""
    if m.adapters or m.lora:
        return False
    trainable = m.schedule[index].trainable or m.presets[min(index, len(m.presets) - 1)]
    return not (set(trainable) <= {"@new"} or "!@encoder" in trainable)


def schedule_source(m: Method, index: int, base: list[dict]) -> dict:
    """The base phase whose schedule phase ``index`` of ``m.schedule`` takes when the base's phases are not one
    per phase of the method: the first, for a phase that trains new parameters only (on an XPT base, the
    phase written for them); else the last, where the base trains every weight. So a one-phase method that
    trains every weight is not run at an lr meant for new parameters alone: Scratch and XPT-SP at an XPT base's
    phase-1 lr (1e-3) never left the unigram predictor in an H200 sweep (RESULTS.md)."""
    if not base:
        return {}
    return base[-1] if trains_reused(m, index) else base[0]


def _schedule(src: dict, steps: int) -> dict:
    """``src``'s lr, decay and min_lr_ratio (those it sets), then its warm-up, at most ``steps``."""
    out = {k: src[k] for k in ("lr", "decay", "min_lr_ratio") if k in src}
    out["warmup_steps"] = min(int(src.get("warmup_steps", 0)), steps)
    return out


def preset_phases(m: Method, base: list[dict]) -> list[dict]:
    """``m.schedule`` as config phases over the base phases' total steps (``method_config``)."""
    schedule, total = m.schedule, sum(int(p.get("steps", 0)) for p in base)
    same = len(base) == len(schedule)
    out, left = [], total
    for i, preset in enumerate(schedule):
        src = base[i] if same else schedule_source(m, i, base)
        steps = int(src.get("steps", 0)) if same else left if i == len(schedule) - 1 else round(preset.share * total)
        left -= steps
        out.append({**preset.as_config(), "steps": steps, **_schedule(src, steps)})
    return out


def _drop_unread_data(cfg: dict, m: Method) -> None:
    """data.source_shards / parallel_shards / parallel_valid_shards that no phase's objectives read, and
    parallel_micro_batch where the method is not trelm (written for another method): left in, the trainer's checks
    would refuse them."""
    data, phases = cfg.get("data") or {}, cfg.get("phases") or []
    if m.trelm and not all(p.get("objectives") for p in phases):
        return  # a phase on the default objectives reads the parallel shards
    listed = {o for p in phases for o in p.get("objectives") or []}
    reads = {"source_shards": "mlm_source" in listed, "parallel_shards": bool(listed & {"cdlm_en_x", "cdlm_x_en"})}
    reads["parallel_valid_shards"] = reads["parallel_shards"]
    reads["parallel_micro_batch"] = True  # trelm's checks take it with or without parallel shards
    for key, read in reads.items():
        if not read or not m.trelm:
            data.pop(key, None)


def config_path(out: Path, method: str) -> Path:
    return out / "configs" / f"{method}.yaml"


@dataclass(frozen=True)
class Run:
    """One run of a sweep: an arm (a labelled method: ``xpt`` or ``xpt_focus=xpt``) at a data size, with a
    replicate seed (None: the config's own seeds)."""
    arm: str
    size: int
    seed: int | None = None

    @property
    def label(self) -> str:
        return f"{self.arm} {size_label(self.size)}" + ("" if self.seed is None else f" seed {self.seed}")


@dataclass
class Plan:
    """Everything every run needs, checked before the first one starts. Dicts are keyed by arm label."""
    out: Path
    arms: dict[str, str]  # label -> method, in the order given
    sizes: list[int]
    seeds: list[int | None]
    nproc: int
    parallel: int
    test_shards: list[str]
    evaluate_args: list[str]
    unigram_shards: list[str]
    finetune_args: list[str] | None  # None: no downstream evaluation
    finetune_sizes: set[int]
    overrides: list[Override]
    steps: dict[tuple[str, int], int]  # total optimizer steps of (arm, size)
    seq_len: dict[tuple[str, int], int]
    keep_best: dict[tuple[str, int], bool]  # checkpoint.keep_best: score and export the best checkpoint
    config_sha: dict[str, str]  # the hash of DIR/configs/ARM.yaml, to notice a changed config on a rerun
    deadline: float | None = None  # time.time() after which no new run starts
    largest_first: bool = False  # the largest size's runs (every seed) before the rest
    rerun_changed: bool = False  # run again a run whose row was made with another config or arguments
    configs: Path | None = None  # where the arm configs are (default DIR/configs; a dry run's: a temporary folder)
    # --score-text: label -> {"file": the text file as given, "sha256": its bytes' hash (16 hex)}, in their order
    score_text: dict[str, dict] = dataclasses.field(default_factory=dict)
    text_source: str | None = None  # the model.source scored on those files too (DIR/source_text.json)
    text_args: list[str] = dataclasses.field(default_factory=list)  # evaluate --text's other arguments
    drop_weights: bool = False  # delete a run's checkpoints and export once its row is written
    probe_text: str | None = None  # --probe-text: the --score-text label each run is also probed on
    # the prepared corpus behind the paths (data_identity): (arm, size) -> its train and valid manifests' hash, and
    # the test shards' manifests' hash; a corpus prepared again in place is another training and other scoring
    data_sha: dict[tuple[str, int], str | None] = dataclasses.field(default_factory=dict)
    test_data: str | None = None

    @property
    def methods(self) -> list[str]:
        return list(self.arms)

    def runs(self) -> list[Run]:
        """Seed by seed (a sweep cut short keeps whole tables of its first seeds), smallest size first, then the
        arms in their order; ``largest_first``: the largest size's runs of every seed first (a sweep cut short
        keeps the headline comparison with its replicates), then the rest in that order."""
        runs = [Run(arm, size, seed) for seed in self.seeds for size in self.sizes for arm in self.arms]
        if not self.largest_first:
            return runs
        top = max(self.sizes)
        return [r for r in runs if r.size == top] + [r for r in runs if r.size != top]

    def run_dir(self, run: Run) -> Path:
        d = self.out / "runs" / run.arm / size_label(run.size)
        return d if run.seed is None else d / f"seed{run.seed}"

    def config_path(self, arm: str) -> Path:
        return self.configs / f"{arm}.yaml" if self.configs is not None else config_path(self.out, arm)

    def train_args(self, run: Run) -> list[str]:
        return ["--config", str(self.config_path(run.arm)), f"--run_dir={self.run_dir(run)}",
                f"--model.method={self.arms[run.arm]}", f"--data.train_tokens={run.size}", *seed_args(run.seed),
                *(o.arg for o in self.overrides if o.applies(run.arm, self.arms[run.arm], run.size))]

    def train_command(self, run: Run) -> list[str]:
        args = self.train_args(run)
        if self.nproc == 1:
            return [sys.executable, "-m", "xpt_ds.cli.train", *args]
        return [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(self.nproc),
                "--master_port", str(free_port()), "--module", "xpt_ds.cli.train", *args]

    def scoring(self, run: Run) -> dict:
        """How a run is scored, as its row records it: a rerun whose scoring differs scores it again
        (``--rerun-changed``) or says so, as for a changed training."""
        finetune = self.finetune_args if run.size in self.finetune_sizes else None
        return {"test_shards": list(self.test_shards), "evaluate_args": list(self.evaluate_args),
                "finetune_args": None if finetune is None else list(finetune),
                "score_text": {label: dict(spec) for label, spec in self.score_text.items()} or None,
                **({"probe_text": self.probe_text} if self.probe_text else {}),
                **({"test_data": self.test_data} if self.test_data else {})}

    def tag_args(self, run: Run) -> list[str]:
        return ["--tag", "best"] if self.keep_best[run.arm, run.size] else []


@dataclass(frozen=True)
class Override:
    """``--set [ARM:][SIZE|LO..HI:]key=value``: a train config override for every run, one arm's (an arm label,
    or a method name: every arm of that method), the runs of one size or of a size range (inclusive; 002 Table A1
    changes batch, lr and steps between such brackets)."""
    arg: str  # --key=value
    arm: str | None = None
    lo: int = 0
    hi: int | None = None

    def applies(self, arm: str, method: str, size: int) -> bool:
        return self.arm in (None, arm, method) and self.lo <= size and (self.hi is None or size <= self.hi)


def parse_arms(items: list[str]) -> dict[str, str]:
    """``--methods xpt scratch xpt_focus=xpt`` -> {label: method}: a method, or LABEL=METHOD for a second arm of a
    method (told apart by ``--set LABEL:...``)."""
    arms: dict[str, str] = {}
    for item in items:
        label, eq, method = item.partition("=")
        method = method if eq else label
        if method not in METHODS:
            raise ConfigError(f"--methods '{item}': unknown method '{method}'; valid: {', '.join(METHODS)}")
        if not label or not label.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"--methods '{item}': the label must be letters, digits, '_' or '-'")
        if label in arms:
            raise ConfigError(f"--methods: '{label}' is given twice")
        if eq and label in METHODS and label != method:
            raise ConfigError(f"--methods '{item}': the label '{label}' is another method's name")
        arms[label] = method
    return arms


def parse_override(item: str, labels: tuple[str, ...] = ()) -> Override:
    head, eq, value = item.partition("=")
    *qualifiers, key = head.split(":")
    if not eq or not key:
        raise ConfigError(f"--set '{item}' must look like [ARM:][SIZE|LO..HI:]key=value")
    if key in SET_BY_SWEEP:
        raise ConfigError(f"--set '{item}': the sweep sets {', '.join(SET_BY_SWEEP)} itself")
    method, sizes = None, None
    for q in qualifiers:
        if (q in METHODS or q in labels) and method is None:
            method = q
        elif q in METHODS or q in labels:  # a second arm
            raise ConfigError(f"--set '{item}': give at most one arm and one size or size range")
        elif sizes is None:
            try:
                sizes = _size_range(q)
            except ValueError:
                raise ConfigError(f"--set '{item}': '{q}' is neither an arm ({', '.join(labels or METHODS)}) nor a "
                                  "size or size range like 100K, 100K..400K or 800K..") from None
        else:
            raise ConfigError(f"--set '{item}': give at most one arm and one size or size range")
    lo, hi = sizes or (0, None)
    if hi is not None and lo > hi:
        raise ConfigError(f"--set '{item}': the size range {size_label(lo)}..{size_label(hi)} is reversed "
                          "(LO..HI, the smaller size first)")
    return Override(f"--{key}={value}", method, lo, hi)


def check_overrides(items: list[str], overrides: list[Override], arms: dict[str, str], sizes: list[int]) -> None:
    """Every ``--set`` item reaches at least one (arm, size) of the sweep: one naming a method that no arm is, or
    sizes that none of ``--sizes`` is in, would change nothing (a typo, or a bracket edge off by a size)."""
    for item, o in zip(items, overrides):
        if not any(o.applies(arm, method, size) for arm, method in arms.items() for size in sizes):
            raise ConfigError(f"--set '{item}': applies to no run of this sweep (arms {', '.join(arms)}; sizes "
                              f"{', '.join(size_label(s) for s in sizes)})")


def _size_range(text: str) -> tuple[int, int | None]:
    """'100K' -> (100000, 100000); '100K..400K' -> (100000, 400000); '800K..' -> (800000, None); '..400K'."""
    first, dots, last = text.partition("..")
    if not dots:
        return parse_size(first), parse_size(first)
    return (parse_size(first) if first else 0), (parse_size(last) if last else None)


def build_plan(a: argparse.Namespace, configs: Path | None = None) -> Plan:
    """Parse sizes and arms, write each arm's config (to DIR/configs, or ``configs``: a dry run leaves the sweep
    folder as it is), and load it with every override and each seed's (the trainer's own checks). The configs are
    checked in a folder of their own and written where the runs read them only once every check has passed: a
    refused command changes nothing."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="xpt_sweep_check_") as checked:
        plan = _build_plan(a, Path(checked), configs)
        folder = configs if configs is not None else a.out / "configs"
        folder.mkdir(parents=True, exist_ok=True)
        for arm in plan.arms:
            (folder / f"{arm}.yaml").write_text((Path(checked) / f"{arm}.yaml").read_text())
    return plan


def seed_args(seed: int | None) -> list[str]:
    """A replicate's seeds as the trainer's arguments (none without --seeds): ``SET_BY_SEEDS``."""
    return [] if seed is None else [f"{key}{seed}" for key in SET_BY_SEEDS]


def _build_plan(a: argparse.Namespace, folder: Path, configs: Path | None) -> Plan:
    sizes = sorted({parse_size(s) for s in a.sizes})
    arms = parse_arms(a.methods)
    seeds = list(dict.fromkeys(a.seeds)) if a.seeds else [None]
    base = read_config_file(a.config)
    overrides = [parse_override(item, tuple(arms)) for item in a.set]
    check_overrides(a.set, overrides, arms, sizes)
    if a.seeds and any(o.arg.startswith(SET_BY_SEEDS) for o in overrides):
        raise ConfigError(f"--set: --seeds sets {', '.join(k[2:-1] for k in SET_BY_SEEDS)} itself")
    if a.parallel > 1 and a.nproc > 1:
        raise ConfigError("--parallel runs one-process runs side by side; it cannot be combined with --nproc > 1")
    finetune_args = _finetune_args(a)
    score_text = parse_score_text(a.score_text)
    finetune_sizes = {parse_size(s) for s in a.finetune_sizes} if a.finetune_sizes else set(sizes)
    if not finetune_sizes <= set(sizes):
        raise ConfigError(f"--finetune-sizes: {', '.join(size_label(s) for s in sorted(finetune_sizes - set(sizes)))} "
                          "is not one of --sizes")
    if finetune_args is not None:
        check_finetune(finetune_args)
    steps, seq_len, best, sha, test_shards, mask_seed = {}, {}, {}, {}, list(a.test_shards), None
    data_sha = {}
    models = []  # each arm's model section at its first size (--score-text: its source must be a decoder)
    for arm, method in arms.items():
        text = yaml.safe_dump(method_config(base, method), sort_keys=False)
        (folder / f"{arm}.yaml").write_text(text)
        sha[arm] = hashlib.sha256(text.encode()).hexdigest()[:16]
        for size in sizes:
            args = [f"--model.method={method}", f"--data.train_tokens={size}",
                    *(o.arg for o in overrides if o.applies(arm, method, size))]
            try:
                cfg = load_config(str(folder / f"{arm}.yaml"), args)
            except ConfigError as e:  # the same --set fits one arm and not another (a one-phase method)
                where = f"arm '{arm}' (model.method {method}), size {size_label(size)}"
                raise ConfigError("\n".join(f"{where}: {line}" for line in str(e).splitlines())) from None
            steps[arm, size], seq_len[arm, size] = sum(p.steps for p in cfg.phases), cfg.data.seq_len
            data_sha[arm, size] = manifests_sha([*cfg.data.train_shards, *cfg.data.valid_shards])
            best[arm, size] = cfg.checkpoint.keep_best
            if size == sizes[0]:
                models.append(cfg.model)
                for seed in seeds if arm == next(iter(arms)) else []:  # a seed fits every arm or none
                    try:
                        load_config(str(folder / f"{arm}.yaml"), [*args, *seed_args(seed)])
                    except ConfigError as e:
                        raise ConfigError(f"--seeds {seed}: {first_line(e)}") from None
            test_shards = test_shards or list(cfg.data.valid_shards)
            mask_seed = cfg.data.seed if mask_seed is None else mask_seed
    if not test_shards:
        raise ConfigError("no test shards: give --test-shards or set data.valid_shards in the base config")
    if not a.test_shards:
        print(f"warning: no --test-shards: every run is scored on the base config's data.valid_shards "
              f"({' '.join(test_shards)}), the split that validation, early stopping and checkpoint.keep_best choose "
              "on, so the figures are not held out; give --test-shards for those", file=sys.stderr)
    from xpt_ds.data.manifest import expand_shards
    expand_shards([*test_shards, *a.unigram])  # that they exist (each run's evaluate checks their tokenizer)
    test_data = manifests_sha(test_shards)
    # Every run is scored on the same masks (the base config's data.seed), whatever seed it trained with.
    evaluate_args = ["--batch-size", str(a.eval_batch_size), "--max-batches", str(a.eval_max_batches),
                     "--seed", str(mask_seed)]
    deadline = time.time() + a.deadline_minutes * 60 if a.deadline_minutes else None
    text_source = check_text_source(models) if score_text else None
    check_probe_text(a.probe_text, score_text)
    return Plan(a.out, arms, sizes, seeds, a.nproc, a.parallel, test_shards, evaluate_args, list(a.unigram),
                finetune_args, finetune_sizes, overrides, steps, seq_len, best, sha, deadline,
                a.largest_first, a.rerun_changed, configs, score_text, text_source,
                ["--batch-size", str(a.eval_batch_size)], a.drop_weights, a.probe_text, data_sha, test_data)


def check_probe_text(label: str | None, score_text: dict[str, dict]) -> None:
    """``--probe-text LABEL`` names one of ``--score-text``'s labels, whose figures LABEL_probe then sits beside."""
    if label is None:
        return
    if label not in score_text:
        raise ConfigError(f"--probe-text {label}: not a --score-text label"
                          + (f" ({', '.join(score_text)})" if score_text else " (give --score-text LABEL=FILE)"))
    if label + PROBE_SUFFIX in score_text:
        raise ConfigError(f"--probe-text {label}: its figures are {label}{PROBE_SUFFIX}, which is also a "
                          "--score-text label; rename that one")


def parse_score_text(items: list[str]) -> dict[str, dict]:
    """``--score-text en=/p/en.txt uk=/p/uk.txt`` -> {label: {"file": path as given, "sha256": 16 hex of its bytes}}.
    A label is a plain identifier (it heads report columns and names RUN_DIR/text_LABEL.json); a file must be
    UTF-8 with some text, as ``evaluate --text`` reads it. The hash goes into each row's scoring record, so a file
    rewritten in place counts as other scoring (``--rerun-changed``)."""
    out: dict[str, dict] = {}
    for item in items:
        label, eq, file = item.partition("=")
        if not eq or not TEXT_LABEL.fullmatch(label):
            raise ConfigError(f"--score-text '{item}': give LABEL=FILE, LABEL a plain identifier (letters, digits "
                              "and '_', not starting with a digit)")
        if label in out:
            raise ConfigError(f"--score-text: the label '{label}' is given twice")
        path = Path(file)
        if not path.is_file():
            raise ConfigError(f"--score-text '{item}': no such file {file}")
        data = path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"--score-text '{item}': {file} is not UTF-8 ({e.reason} at byte {e.start})") from None
        if not text.strip():
            raise ConfigError(f"--score-text '{item}': {file} has no text (every line is blank)")
        out[label] = {"file": file, "sha256": hashlib.sha256(data).hexdigest()[:16]}
    return out


def check_text_source(models: list) -> str:
    """The source ``--score-text`` scores as the reference (DIR/source_text.json): the first arm's model.source
    (the base config's unless ``--set`` changes it). Every arm's source must be a decoder, read from its config
    alone (no weights): raw text is scored by next-token prediction (``evaluate --text``), which a masked LM's
    export cannot do. The reference is loaded as ``evaluate --text`` loads it: a directory or a hub id with tokenizer
    files, or a .gguf file (its tokenizer is inside)."""
    from xpt_ds.embedding_init.files import HF_TOKENIZER_FILES
    from xpt_ds.io.trust import first_file
    from xpt_ds.model.build import source_config
    from xpt_ds.model.decoder import is_decoder
    for model in models:
        config = source_config(model)  # a directory, a .gguf file or a hub id; else one line naming model.source
        if not is_decoder(config):
            raise ConfigError(f"--score-text: model.source {model.source} is a {config.model_type} model, not a "
                              "decoder: only a decoder's export is scored on raw text (evaluate --text)")
    source = models[0].source
    if source.endswith(".gguf"):
        return source  # source_config found the file; its tokenizer is inside
    if first_file(source, HF_TOKENIZER_FILES) is None:
        raise ConfigError(f"--score-text: model.source {source} has no tokenizer files "
                          f"({', '.join(HF_TOKENIZER_FILES[:3])}, ...): the source is scored on the same text "
                          "(source_text.json) in its own tokenizer")
    return source


def check_finetune(args: list[str]) -> None:
    """The fine-tuning flags and files as ``xpt_ds.cli.finetune`` checks them before it loads a model (a bad metric,
    a missing file or label column), now: not after the first run has trained."""
    from xpt_ds.finetuning.config import parse_flags, validate
    from xpt_ds.finetuning.data import FinetuneError
    from xpt_ds.finetuning.splits import read_splits
    try:
        cfg = parse_flags([*args, "--model", "(each run's export)", "--out", "(each run's finetune/)"])
        validate(cfg)
        read_splits(cfg)
    except FinetuneError as e:
        raise ConfigError(f"--finetune-*: {e}") from None


def _finetune_args(a: argparse.Namespace) -> list[str] | None:
    given = {f.name: getattr(a, "finetune_" + f.name) for f in dataclasses.fields(FinetuneConfig)
             if f.name not in FINETUNE_SET_BY_SWEEP and hasattr(a, "finetune_" + f.name)}
    if not given:
        return None
    if not given.get("train") or not given.get("test"):
        raise ConfigError("downstream evaluation needs both --finetune-train and --finetune-test")
    args = []
    for name, value in given.items():
        if isinstance(value, bool):  # a switch: given or not (--finetune-activation-checkpointing)
            args += ["--" + name.replace("_", "-")] if value else []
            continue
        args += ["--" + name.replace("_", "-"), *map(str, value if isinstance(value, list) else [value])]
    return args
