"""The one typed config tree.

Precedence: dataclass defaults < YAML/JSON file < ``--section.key=value`` overrides.
Unknown keys and wrong types raise ``ConfigError`` naming the dotted key. Every field's
docstring-like ``help`` metadata is what ``python -m xpt_ds.train --help`` prints.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from xpt_ds.methods import METHODS

DECAYS = ("linear", "cosine", "constant")
# What a phase trains on (phases[i].objectives); all but mlm_target need model.method trelm (xpt_ds.trelm_objective).
OBJECTIVES = ("mlm_target", "mlm_source", "cdlm_en_x", "cdlm_x_en")
OBJECTIVE_DATA = {"mlm_target": "train_shards", "mlm_source": "source_shards", "cdlm_en_x": "parallel_shards",
                  "cdlm_x_en": "parallel_shards"}  # the data.* key each objective reads
H100_PEAK_TFLOPS = 989.0  # dense bf16, H100 SXM: the MFU denominator on CUDA unless logging.peak_tflops is set
# Keys renamed since checkpoints started carrying their config: old name -> new name (read_checkpoint_config).
RENAMED_KEYS = {("guard", "straggler_ratio"): ("guard", "slow_step_ratio")}


class ConfigError(ValueError):
    """A bad config value; the message names the key and fits on one line."""


def doc(default, help: str):
    """A dataclass field with a default and a help string."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class ModelConfig:
    source: str = doc("", "English *ForMaskedLM checkpoint: hub id or local directory (BERT or RoBERTa family).")
    tokenizer: str = doc("", "Target-language SentencePiece .model file; for a method that keeps the source "
                             "vocabulary (keep_vocab), the source's Hugging Face tokenizer (empty = model.source's).")
    method: str = doc("xpt", f"One of {', '.join(METHODS)}.")
    embedding_init: str = doc("random", "How the new target word embeddings start: a name in "
                                        "xpt_ds.embedding_init.STRATEGIES (random, source_mean, frequency_rank, "
                                        "overlap_copy, focus, aligned, from_file).")
    embedding_init_args: dict = doc({}, "Options of model.embedding_init (e.g. {static: emb/uk.npy} for focus); "
                                        "each strategy names its keys.")
    itl_init: str = doc("random", "ITL_in/ITL_out start 'random' (paper) or as a 'copy' of the first/last encoder layer.")
    phase1_trains_position_and_head: bool = doc(
        False, "xpt phase-1 preset also trains position embeddings and the LM-head transform (000 §2).")
    adapter_size: int = doc(64, "Bottleneck width of the Houlsby adapters (method=adapters).")
    mask_token: str = doc("", "Mask piece in the SentencePiece vocab; empty = '<mask>' or '[MASK]', whichever exists.")
    dropout: float = doc(-1.0, "Hidden and attention dropout; negative keeps the source model's values.")
    init_seed: int = doc(1234, "Seed for every randomly initialised parameter.")


@dataclass
class MergeConfig:
    take: dict = doc({}, "Parameter regex or @group -> name of an earlier phase: those parameters start from that "
                         "phase's end weights, bit for bit (TreLM: {'@lower': x_to_en, '@upper': en_to_x}).")
    average: list[str] = doc([], "Earlier phases whose end weights are averaged (element-wise mean, in fp32) for "
                                 "every parameter no take pattern assigns.")


@dataclass
class PhaseConfig:
    name: str = doc("", "Phase name, shown in logs, TensorBoard and checkpoints.")
    steps: int = doc(0, "Optimizer steps in this phase.")
    lr: float = doc(1e-4, "Peak learning rate.")
    warmup_steps: int = doc(0, "Linear warmup steps from 0 to the peak.")
    decay: str = doc("linear", f"Decay after warmup: one of {', '.join(DECAYS)}.")
    min_lr_ratio: float = doc(0.0, "Learning rate at the end of the phase, as a fraction of the peak.")
    trainable: list[str] = doc([], "Parameter name regexes or @groups that train, '!PATTERN' to leave some out "
                                   "(['@all', '!@lower']); empty = the method's preset.")
    start_from: str = doc("", "Name of an earlier phase: this phase starts from the weights and the data position "
                              "that phase ended with (a branch); empty = where the previous phase ended.")
    merge: MergeConfig = doc(None, "Start from a merge of earlier phases' end weights (take / average); the data "
                                   "stream continues where the previous phase left it.")
    objectives: list[str] = doc([], f"What the phase trains on, one mean loss each, summed: {', '.join(OBJECTIVES)} "
                                    "(target MLM; English MLM on data.source_shards; CdLM English->target and "
                                    "target->English on data.parallel_shards; all but mlm_target need method "
                                    "trelm, and every phase has mlm_target). Empty = mlm_target, plus cdlm_en_x "
                                    "for trelm with data.parallel_shards.")

    def __post_init__(self):
        _fill_sections(self)

    @property
    def merges(self) -> bool:
        return bool(self.merge.take or self.merge.average)

    def reads(self) -> list[str]:
        """The earlier phases whose end weights this phase starts from (none: it continues the previous one)."""
        names = [self.start_from] if self.start_from else list(self.merge.take.values()) + self.merge.average
        return list(dict.fromkeys(names))


@dataclass
class DataConfig:
    train_shards: list[str] = doc([], "Training WebDataset shards: paths, brace patterns or a manifest.json.")
    valid_shards: list[str] = doc([], "Validation shards, same forms; empty disables validation.")
    seq_len: int = doc(512, "Packed sequence length including the two special tokens.")
    mask_prob: float = doc(0.15, "Fraction of tokens selected for MLM.")
    mask_replace_prob: float = doc(0.8, "Of the selected tokens, fraction replaced by the mask token.")
    random_replace_prob: float = doc(0.1, "Of the selected tokens, fraction replaced by a random token.")
    seed: int = doc(0, "Seed for shard order, document shuffling and masking.")
    shuffle_docs: int = doc(10000, "Shuffle-buffer size in documents (after shuffling the shard order); <= 1 disables.")
    doc_separator: bool = doc(True, "Put the sep token between packed documents (RoBERTa full-sentences).")
    num_workers: int = doc(2, "DataLoader worker processes per rank (0 = read in the training process).")
    on_corrupt_shard: str = doc("fail", "A corrupt shard is 'fail' (stop, naming it) or 'skip' (logged and counted).")
    train_tokens: int = doc(0, "Use only the first N tokens of the training corpus, in the fixed document order of "
                               "data.seed (pieces plus separators; the last document is cut), the same subset every "
                               "epoch; a smaller N's subset is a prefix of a larger one's. 0 = all.")
    parallel_shards: list[str] = doc([], "model.method trelm: parallel shards for CdLM (docs/shard_format.md, "
                                         "'Parallel shards'): paths, brace patterns or a parallel manifest.json:split "
                                         "made with model.tokenizer and model.source's tokenizer. Empty = target MLM "
                                         "only.")
    source_shards: list[str] = doc([], "model.method trelm: English shards for the mlm_source objective, made with "
                                       "model.source's tokenizer (data_tools.prepare --hf-tokenizer SOURCE): "
                                       "paths, brace patterns or a manifest.json:split. Packed and masked like "
                                       "data.train_shards, optim.micro_batch_size sequences per micro-batch.")
    parallel_micro_batch: int = doc(0, "CdLM sentence pairs joined to each micro-batch of target MLM sequences "
                                       "(data.parallel_shards); 0 = optim.micro_batch_size.")


@dataclass
class OptimConfig:
    micro_batch_size: int = doc(8, "Sequences per rank per forward pass.")
    grad_accum: int = doc(1, "Micro-batches accumulated per optimizer step.")
    weight_decay: float = doc(0.01, "AdamW weight decay (not applied to biases and LayerNorm).")
    betas: list[float] = doc([0.9, 0.98], "Adam betas (RoBERTa values).")
    eps: float = doc(1e-6, "Adam epsilon.")
    grad_clip: float = doc(1.0, "Global gradient-norm clip; 0 disables.")
    torch_adam: bool = doc(False, "Use torch.optim.AdamW instead of DeepSpeed FusedAdam (bitwise-exact resume on CPU).")


@dataclass
class CheckpointConfig:
    every_steps: int = doc(1000, "Save every N global steps (and always at the end of each phase); 0 = phase ends only.")
    resume: str = doc("auto", "'auto' = newest complete checkpoint in the run, 'none' = start fresh, else a tag.")
    keep_last: int = doc(0, "Keep the newest K complete checkpoints (0 = all); the newest complete one is never deleted.")
    allow_pickle: bool = doc(False, "Resume from checkpoint files that are not plain data (a pickle that names "
                                    "code); only for a checkpoint you wrote and trust (README: What xpt-ds trusts).")


@dataclass
class LoggingConfig:
    log_every: int = doc(10, "Steps between host syncs for loss/lr/grad-norm/throughput logging.")
    eval_every: int = doc(500, "Steps between validation passes; 0 = phase ends only.")
    eval_batches: int = doc(20, "Validation micro-batches per pass; 0 = the whole validation set.")
    tensorboard: bool = doc(True, "Write TensorBoard scalars under RUN_DIR/tb.")
    peak_tflops: float = doc(0.0, f"Per-device dense peak TFLOP/s for MFU; 0 = {H100_PEAK_TFLOPS:g} on CUDA (H100 SXM "
                                      "bf16), none on CPU.")
    progress_bar: bool = doc(True, "Show a tqdm progress bar on rank 0.")


@dataclass
class GuardConfig:
    max_bad_steps: int = doc(5, "More non-finite (NaN/inf loss or gradient) steps in a row than this: checkpoint "
                                "and halt. Each one is skipped (no update) and counted.")
    loss_spike_ratio: float = doc(1.5, "Warn when a logged loss exceeds this multiple of the median of the last "
                                       "guard.loss_spike_window logged losses; 0 = off.")
    loss_spike_window: int = doc(20, "Logged losses whose median the spike check compares against.")
    slow_step_ratio: float = doc(3.0, "Multi-rank runs: log a 'slow step' line (with the rank that waited longest "
                                      "for data) when a step takes this multiple of the median of the last "
                                      "guard.slow_step_window steps, at most once per window; 0 = off.")
    slow_step_window: int = doc(50, "Steps whose median step time the slow-step check compares against.")
    inject_nan_steps: list[int] = doc([], "Testing: rank 0's loss is made NaN at these global steps (1-based).")


@dataclass
class TrainConfig:
    run_dir: str = doc("runs/default", "Output directory: config, checkpoints, TensorBoard, logs.")
    deepspeed: str = doc("ds_configs/zero2_bf16.json", "Engine-only DeepSpeed JSON (see ds_configs/).")
    seed: int = doc(0, "Seed of each rank's dropout RNG (offset by rank).")
    model: ModelConfig = doc(None, "Model construction.")
    phases: list[PhaseConfig] = doc([], "List of phases (PhaseConfig).")
    data: DataConfig = doc(None, "Shards, packing and masking.")
    optim: OptimConfig = doc(None, "Optimizer, batch and clipping.")
    checkpoint: CheckpointConfig = doc(None, "Saving and resuming.")
    logging: LoggingConfig = doc(None, "Logging, validation and TensorBoard.")
    guard: GuardConfig = doc(None, "Non-finite steps, loss spikes and slow steps.")

    def __post_init__(self):
        _fill_sections(self)


def _fill_sections(obj) -> None:
    """Sections left at None get their defaults (a dataclass default must not be a shared instance)."""
    for f in dataclasses.fields(obj):
        if getattr(obj, f.name) is None and dataclasses.is_dataclass(_field_type(f)):
            setattr(obj, f.name, _field_type(f)())


def _field_type(f: dataclasses.Field):
    t = f.type
    if isinstance(t, str):
        t = eval(t, globals())  # annotations are strings under `from __future__ import annotations`
    return t


def _element_type(typ):
    """``list[X]`` -> X (every list field declares its element type)."""
    return typing.get_args(typ)[0]


class Override(str):
    """The raw text of a ``--key=value`` override: converted by the target field's type, not by YAML rules
    (YAML 1.1 reads ``5e-4`` as a string and ``no`` as False)."""


_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def _coerce_override(value: Override, typ, key: str):
    try:
        if typ is bool:
            return _BOOL_WORDS[value.lower()]
        if typ in (int, float):
            return typ(value)
    except (KeyError, ValueError):
        raise ConfigError(f"config key '{key}' must be {'a bool' if typ is bool else 'an ' + typ.__name__}, "
                          f"got {str(value)!r}") from None
    return str(value)


def coerce(value, typ, key: str):
    """Check/convert one leaf value; ints are accepted where floats are expected."""
    if isinstance(value, Override):
        return _coerce_override(value, typ, key)
    if typ is float and isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
        with contextlib.suppress(ValueError):
            return float(value)
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config key '{key}' must be a bool, got {value!r}")
    if typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"config key '{key}' must be an int, got {value!r}")
    if typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"config key '{key}' must be a float, got {value!r}")
    if typ is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"config key '{key}' must be a string, got {value!r}")
    raise ConfigError(f"config key '{key}' has unsupported type {typ}")


def from_dict(cls, data, prefix: str = ""):
    """Build dataclass ``cls`` from a nested dict, rejecting unknown keys and wrong types."""
    if not isinstance(data, dict):
        raise ConfigError(f"config section '{prefix.rstrip('.') or '<root>'}' must be a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if k not in fields:
            raise ConfigError(f"unknown config key '{key}' (valid: {', '.join(fields)})")
        typ = _field_type(fields[k])
        if isinstance(v, Override) and typ is not str and typ not in (int, float, bool):
            v = yaml.safe_load(v)  # a whole section or list given on the command line
        if dataclasses.is_dataclass(typ):
            kwargs[k] = from_dict(typ, v, key + ".")
        elif typ is dict:  # free-form options; whoever owns them checks keys and types (embedding_init_args)
            if not isinstance(v, dict) or not all(isinstance(x, str) for x in v):
                raise ConfigError(f"config key '{key}' must be a mapping of names to values, got {v!r}")
            kwargs[k] = dict(v)
        elif typing.get_origin(typ) is list:
            if not isinstance(v, list):
                raise ConfigError(f"config key '{key}' must be a list, got {v!r}")
            elem = _element_type(typ)
            if dataclasses.is_dataclass(elem):
                kwargs[k] = [from_dict(elem, x, f"{key}[{i}].") for i, x in enumerate(v)]
            else:
                kwargs[k] = [coerce(x, elem, f"{key}[{i}]") for i, x in enumerate(v)]
        else:
            kwargs[k] = coerce(v, typ, key)
    return cls(**kwargs)


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def _parse_override(arg: str) -> tuple[list[str], Override]:
    if not arg.startswith("--") or "=" not in arg:
        raise ConfigError(f"override '{arg}' must look like --section.key=value")
    key, raw = arg[2:].split("=", 1)
    return key.split("."), Override(raw)


def _child(node, part: str, original: str, create: bool):
    """``node[part]`` for a dict (created when missing) or a list (by in-range index)."""
    if isinstance(node, list):
        if not part.isdigit() or int(part) >= len(node):
            raise ConfigError(f"override '{original}': '{part}' is not an index of a list of {len(node)}")
        return int(part)
    if not isinstance(node, dict):
        raise ConfigError(f"override '{original}': '{part}' is inside a value, not a section")
    if create:
        node.setdefault(part, {})
    return part


def _set_path(data: dict, path: list[str], value, original: str):
    node = data
    for part in path[:-1]:
        node = node[_child(node, part, original, create=True)]
    node[_child(node, path[-1], original, create=False)] = value


def read_config_file(path: str | Path) -> dict:
    """A YAML or JSON config file as a dict; a missing, unreadable or unparsable file is a ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        text = p.read_text()
        data = json.loads(text) if p.suffix == ".json" else (yaml.safe_load(text) or {})
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror or e}") from None
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} does not parse: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(data).__name__}")
    return data


def load_config(path: str | None, overrides: list[str] = ()) -> TrainConfig:
    """Defaults < file < overrides; then validate."""
    data: dict = read_config_file(path) if path else {}
    for arg in overrides:
        keys, value = _parse_override(arg)
        _set_path(data, keys, value, arg)
    for (section, old), (new_section, new) in RENAMED_KEYS.items():
        if isinstance(data.get(section), dict) and old in data[section]:
            raise ConfigError(f"config key '{section}.{old}' was renamed '{new_section}.{new}'")
    cfg = from_dict(TrainConfig, data)
    validate(cfg)
    return cfg


def validate(cfg: TrainConfig) -> None:
    """Checks that need no files; model/tokenizer/phase-pattern checks live with their builders."""
    m = cfg.model
    if m.method not in METHODS:
        raise ConfigError(f"config key 'model.method' is '{m.method}'; valid: {', '.join(METHODS)}")
    if m.itl_init not in ("random", "copy"):
        raise ConfigError(f"config key 'model.itl_init' is '{m.itl_init}'; valid: random, copy")
    if not m.source:
        raise ConfigError("config key 'model.source' is required (hub id or local path)")
    from xpt_ds.embedding_init import check_args  # imported here: embedding_init imports this module
    m.embedding_init_args = check_args(m.embedding_init, m.embedding_init_args)
    if not m.tokenizer and METHODS[m.method].vocab == "target":
        raise ConfigError("config key 'model.tokenizer' is required (SentencePiece .model file)")
    if not cfg.phases:
        raise ConfigError("config key 'phases' is empty; give at least one phase with steps and lr")
    for i, ph in enumerate(cfg.phases):
        key = f"phases[{i}]"
        if not ph.name:
            raise ConfigError(f"config key '{key}.name' is required")
        if ph.steps <= 0:
            raise ConfigError(f"config key '{key}.steps' must be > 0, got {ph.steps}")
        if ph.lr <= 0:
            raise ConfigError(f"config key '{key}.lr' must be > 0, got {ph.lr}")
        if not 0 <= ph.warmup_steps <= ph.steps:
            raise ConfigError(f"config key '{key}.warmup_steps' must be in [0, steps={ph.steps}], got {ph.warmup_steps}")
        if ph.decay not in DECAYS:
            raise ConfigError(f"config key '{key}.decay' is '{ph.decay}'; valid: {', '.join(DECAYS)}")
        if not 0.0 <= ph.min_lr_ratio <= 1.0:
            raise ConfigError(f"config key '{key}.min_lr_ratio' must be in [0, 1], got {ph.min_lr_ratio}")
    names = [ph.name for ph in cfg.phases]
    if len(set(names)) != len(names):
        raise ConfigError(f"config key 'phases' has duplicate names: {names}")
    from xpt_ds.phase_checks import check_objectives, check_phase_start  # they read the sections defined here
    for i, ph in enumerate(cfg.phases):
        check_phase_start(i, ph, names)
    if not cfg.data.train_shards:
        raise ConfigError("config key 'data.train_shards' is empty")
    if cfg.data.seq_len < 8:
        raise ConfigError(f"config key 'data.seq_len' must be >= 8, got {cfg.data.seq_len}")
    d = cfg.data
    if not 0 < d.mask_prob < 1 or d.mask_replace_prob + d.random_replace_prob > 1 or min(
            d.mask_replace_prob, d.random_replace_prob) < 0:
        raise ConfigError("config keys 'data.mask_*' must satisfy 0<mask_prob<1 and replace fractions summing to <= 1")
    if d.on_corrupt_shard not in ("fail", "skip"):
        raise ConfigError(f"config key 'data.on_corrupt_shard' is '{d.on_corrupt_shard}'; valid: fail, skip")
    if d.train_tokens < 0:
        raise ConfigError(f"config key 'data.train_tokens' must be >= 0 (0 = all), got {d.train_tokens}")
    if d.num_workers < 0:
        raise ConfigError(f"config key 'data.num_workers' must be >= 0, got {d.num_workers}")
    if d.parallel_shards and not METHODS[m.method].trelm:
        raise ConfigError(f"config key 'data.parallel_shards' is set but model.method '{m.method}' reads no "
                          "parallel data (only trelm does)")
    if d.source_shards and not METHODS[m.method].trelm:
        raise ConfigError(f"config key 'data.source_shards' is set but model.method '{m.method}' reads no English "
                          "text (only trelm does)")
    if d.parallel_micro_batch < 0:
        raise ConfigError(f"config key 'data.parallel_micro_batch' must be >= 0, got {d.parallel_micro_batch}")
    check_objectives(cfg)
    o = cfg.optim
    for k in ("micro_batch_size", "grad_accum"):
        if getattr(o, k) < 1:
            raise ConfigError(f"config key 'optim.{k}' must be >= 1, got {getattr(o, k)}")
    if len(o.betas) != 2:
        raise ConfigError(f"config key 'optim.betas' must have 2 values, got {o.betas}")
    if cfg.checkpoint.keep_last < 0:
        raise ConfigError(f"config key 'checkpoint.keep_last' must be >= 0, got {cfg.checkpoint.keep_last}")
    if cfg.logging.log_every < 1:
        raise ConfigError(f"config key 'logging.log_every' must be >= 1, got {cfg.logging.log_every}")
    g = cfg.guard
    if g.max_bad_steps < 0:
        raise ConfigError(f"config key 'guard.max_bad_steps' must be >= 0, got {g.max_bad_steps}")
    for k in ("loss_spike_ratio", "slow_step_ratio"):
        if getattr(g, k) != 0 and getattr(g, k) <= 1:
            raise ConfigError(f"config key 'guard.{k}' must be > 1 (or 0 = off), got {getattr(g, k)}")
    for k in ("loss_spike_window", "slow_step_window"):
        if getattr(g, k) < 2:
            raise ConfigError(f"config key 'guard.{k}' must be >= 2, got {getattr(g, k)}")


def read_checkpoint_config(data: dict) -> TrainConfig:
    """The config a checkpoint carries, as a TrainConfig (keys renamed since it was written are renamed)."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for (section, old), (new_section, new) in RENAMED_KEYS.items():
        if old in data.get(section, {}):
            data.setdefault(new_section, {})[new] = data[section].pop(old)
    return from_dict(TrainConfig, data)


def save_config(cfg: TrainConfig, path: Path) -> None:
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def help_text(cls=TrainConfig, prefix: str = "") -> str:
    lines = []
    for f in dataclasses.fields(cls):
        typ = _field_type(f)
        if dataclasses.is_dataclass(typ):
            lines.append(help_text(typ, f"{prefix}{f.name}."))
        else:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            lines.append(f"  --{prefix}{f.name}={default!r}\n      {f.metadata.get('help', '')}")
    return "\n".join(lines)
