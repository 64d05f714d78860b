"""The run's typed config tree: one dataclass per section, every field with its default and help.

``xpt_ds.config.manager`` loads it (defaults < YAML/JSON file < ``--section.key=value``) and
``xpt_ds.config.validate`` checks it; the help metadata is what ``python -m xpt_ds.cli.train --help`` prints.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field

from xpt_ds.config.methods import METHODS
from xpt_ds.errors import UserError

DECAYS = ("linear", "cosine", "constant")
MASKINGS = ("token", "whole_word", "span")  # data.masking (xpt_ds.data.masking)
ATTENTIONS = ("sdpa", "flex")  # model.attention (xpt_ds.model.forward.document_mask)
# What a phase trains on (phases[i].objectives); all but mlm_target need model.method trelm (xpt_ds.trelm.objective).
OBJECTIVES = ("mlm_target", "mlm_source", "cdlm_en_x", "cdlm_x_en")
OBJECTIVE_DATA = {"mlm_target": "train_shards", "mlm_source": "source_shards", "cdlm_en_x": "parallel_shards",
                  "cdlm_x_en": "parallel_shards"}  # the data.* key each objective reads
H100_PEAK_TFLOPS = 989.0  # dense bf16, H100 SXM: the MFU denominator on CUDA unless logging.peak_tflops is set
# Keys renamed since checkpoints started carrying their config: old name -> new name (read_checkpoint_config).
RENAMED_KEYS = {("guard", "straggler_ratio"): ("guard", "slow_step_ratio")}


class ConfigError(UserError, ValueError):
    """A bad config value; the message names the key and fits on one line."""


def doc(default, help: str):
    """A dataclass field with a default and a help string."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class LoraConfig:
    rank: int = doc(8, "LoRA rank r (method=lora).")
    alpha: float = doc(16.0, "LoRA scale numerator: an update is B·A·alpha/rank.")
    dropout: float = doc(0.0, "Dropout on the LoRA branch's input.")
    targets: list[str] = doc([], "Linear maps of each decoder layer that get LoRA, by name (Llama: q_proj ... "
                                 "down_proj; GPT-2: c_attn, c_proj, c_fc); empty = all of them.")


@dataclass
class ModelConfig:
    source: str = doc("", "English *ForMaskedLM checkpoint (BERT or RoBERTa family) or *ForCausalLM (GPT-2 or Llama "
                          "family, docs/decoders.md): hub id or local directory.")
    tokenizer: str = doc("", "Target-language SentencePiece .model file; for a method that keeps the source "
                             "vocabulary (keep_vocab), the source's Hugging Face tokenizer (empty = model.source's); "
                             "for extend, the directory xpt-data extend-vocab writes.")
    method: str = doc("xpt", f"One of {', '.join(METHODS)}.")
    embedding_init: str = doc("random", "How the new target word embeddings start: a name in "
                                        "xpt_ds.config.embedding_args.EMBEDDING_INITS (random, source_mean, "
                                        "frequency_rank, overlap_copy, focus, aligned, from_file, subword_mean).")
    embedding_init_args: dict = doc({}, "Options of model.embedding_init (e.g. {static: emb/uk.npy} for focus); "
                                        "each strategy names its keys.")
    head_bias_init: str = doc("zero", "How the MLM head's output bias starts for a new vocabulary: 'zero' (the "
                                      "stock init, the papers') or 'unigram', each piece's log add-one frequency in "
                                      "data.train_shards: the head starts as the unigram predictor, so the steps go to "
                                      "context rather than to piece frequencies (encoder sources).")
    itl_init: str = doc("random", "ITL_in/ITL_out start 'random' (paper) or as a 'copy' of the first/last encoder "
                                  "layer.")
    phase1_trains_position_and_head: bool = doc(
        False, "Phase 1 of a two-phase preset (xpt, xpt_no_itl, random_source) also trains position embeddings "
               "and the LM-head transform (000 §2).")
    adapter_size: int = doc(64, "Bottleneck width of the Houlsby adapters (method=adapters; refused with others).")
    lora: LoraConfig = doc(None, "LoRA on the reused decoder layers (method=lora, decoder sources; refused with "
                                "other methods).")
    mask_token: str = doc("", "Mask piece in the SentencePiece vocab; empty = '<mask>' or '[MASK]', whichever exists.")
    dropout: float = doc(-1.0, "Hidden and attention dropout (GPT-2: residual, embedding and attention; the Llama "
                               "layout has attention dropout only); negative keeps the source model's values.")
    attention: str = doc("sdpa", "How a decoder source's attention keeps packed documents apart: 'sdpa' (a dense "
                                 "block-diagonal mask) or 'flex' (FlexAttention with a document BlockMask that "
                                 "skips the masked blocks; compiled, no attention dropout). docs/decoders.md.")
    init_seed: int = doc(1234, "Seed for every randomly initialised parameter.")

    def __post_init__(self):
        _fill_sections(self)


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
    warmup_steps: int = doc(0, "Linear warmup steps: step k (from 0) runs at (k+1)/warmup_steps of the peak.")
    decay: str = doc("linear", f"Decay after warmup: one of {', '.join(DECAYS)}.")
    min_lr_ratio: float = doc(0.0, "Learning rate the decay (linear or cosine) reaches at the end of the phase, "
                                   "after its last step, as a fraction of the peak: the last step trains one decay "
                                   "step above it, as in Hugging Face's schedulers. Warmup's last step and "
                                   "the decay's first (step warmup_steps) both run at the peak.")
    trainable: list[str] = doc([], "Parameter name regexes or @groups that train, '!PATTERN' to leave some out "
                                   "(['@all', '!@lower']); empty = the method's preset.")
    start_from: str = doc("", "Name of an earlier phase: this phase starts from the weights and the data position "
                              "that phase ended with (a branch); empty = where the previous phase ended.")
    merge: MergeConfig = doc(None, "Start from a merge of earlier phases' end weights (take / average); the data "
                                   "stream continues where the previous phase left it.")
    mix: dict = doc({}, "data.mix weights in this phase, by corpus name ({en: 0}: none of it; {en: 0.2}); a corpus "
                        "not named keeps its data.mix weight. Every corpus continues at the row where it stopped.")
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


MIX_PERIOD = 10_000  # data.mix: the rows of the mixture's repeating pattern, so weights resolve to 1/MIX_PERIOD


@dataclass
class MixConfig:
    name: str = doc("", "The corpus's name in the logs and metrics (data/NAME/epoch, valid/NAME/*): letters, digits, "
                        "'_', '-' or '.'; not 'train', which names data.train_shards.")
    shards: list[str] = doc([], "Its training shards, made with model.tokenizer: paths, brace patterns or a "
                                "manifest.json:split.")
    weight: float = doc(0.0, "The fraction of training sequences taken from it, 0 < weight < 1; data.train_shards "
                             "gives the rest (1 minus every entry's weight), in steps of 1/10000.")
    valid_shards: list[str] = doc([], "Its validation shards, scored at every validation as valid/NAME/*; empty: "
                                      "none.")


@dataclass
class DataConfig:
    train_shards: list[str] = doc([], "Training WebDataset shards: paths, brace patterns or MANIFEST.json:SPLIT "
                                      "(data/ko/manifest.json:train).")
    valid_shards: list[str] = doc([], "Validation shards, same forms; empty disables validation.")
    seq_len: int = doc(512, "Packed sequence length including the two special tokens.")
    mask_prob: float = doc(0.15, "Fraction of tokens selected for MLM.")
    mask_replace_prob: float = doc(0.8, "Of the selected tokens, fraction replaced by the mask token.")
    random_replace_prob: float = doc(0.1, "Of the selected tokens, fraction replaced by a random token.")
    masking: str = doc("token", "What MLM masks, data.mask_prob of the maskable pieces in all: 'token' (single "
                                "pieces), 'whole_word' (every piece of a word) or 'span' (runs of whole words, "
                                "SpanBERT); docs/data.md, 'Masking'.")
    span_p: float = doc(0.2, "data.masking span: span lengths in words are geometric with this p, truncated to "
                             "1..data.span_max and renormalised (SpanBERT: 0.2 and 10, mean 3.8 words).")
    span_max: int = doc(10, "data.masking span: the longest span, in words.")
    seed: int = doc(0, "Seed for shard order, document shuffling and masking.")
    shuffle_docs: int = doc(10000, "Shuffle-buffer size in documents (after shuffling the shard order); <= 1 disables.")
    doc_separator: bool = doc(True, "Put the sep token between packed documents (RoBERTa full-sentences).")
    num_workers: int = doc(2, "DataLoader worker processes per rank and stream (training, validation, TreLM's "
                              "English), forked once before training and kept for the run (0 = read in the "
                              "training process).")
    on_corrupt_shard: str = doc("fail", "A corrupt shard is 'fail' (stop, naming it) or 'skip' (logged and counted).")
    reuse_scans: bool = doc(True, "Record each shard's start-up scan (index, largest id, checks) in RUN_DIR/scans, so "
                                  "that a resume reads it instead of reading the shard again, unless the file or what "
                                  "its manifest records changed; the ranks of a node share a first start's scans "
                                  "(docs/shard_format.md). false: every rank scans every shard at every start.")
    train_tokens: int = doc(0, "Use only the first N tokens of the training corpus, in the fixed document order of "
                               "data.seed (pieces plus separators; the last document is cut), the same subset every "
                               "epoch; a smaller N's subset is a prefix of a larger one's. 0 = all.")
    mix: list[MixConfig] = doc([], "Other corpora blended into the training stream (English text kept in view, a "
                                   "second target corpus; docs/data.md, 'Blending corpora'), each a name, shards, a "
                                   "weight and optional validation shards. Each corpus streams its own epochs in a "
                                   "fixed interleave of rows; data.train_tokens restricts data.train_shards only.")
    parallel_shards: list[str] = doc([], "model.method trelm: parallel shards for CdLM (docs/shard_format.md, "
                                         "'Parallel shards'): paths, brace patterns or a parallel manifest.json:split "
                                         "made with model.tokenizer and model.source's tokenizer. Empty = target MLM "
                                         "only.")
    source_shards: list[str] = doc([], "model.method trelm: English shards for the mlm_source objective, made with "
                                       "model.source's tokenizer (data_tools.cli.prepare --hf-tokenizer SOURCE): "
                                       "paths, brace patterns or a manifest.json:split. Packed and masked like "
                                       "data.train_shards, optim.micro_batch_size sequences per micro-batch.")
    parallel_micro_batch: int = doc(0, "model.method trelm: CdLM sentence pairs joined to each micro-batch of "
                                       "target MLM sequences (data.parallel_shards); 0 = optim.micro_batch_size.")
    parallel_valid_shards: list[str] = doc([], "model.method trelm: validation pairs for CdLM, same forms as "
                                               "data.parallel_shards (the same data_tools.cli.parallel run's "
                                               "manifest.json:valid). Every validation pass also scores each CdLM "
                                               "direction a phase trains (valid/cdlm_en_x/*, valid/cdlm_x_en/*), "
                                               "data.parallel_micro_batch pairs per batch. Empty = none.")


# The data.* keys that decide what an evaluation masks and packs: an export carries them (config.json's
# ``xpt_data``), so ``evaluate --model`` scores the positions ``evaluate --run`` and the run's validation score.
MASKING_KEYS = ("seq_len", "seed", "masking", "mask_prob", "mask_replace_prob", "random_replace_prob", "span_p",
                "span_max", "doc_separator")


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
class ActivationsConfig:
    checkpoint_every: int = doc(0, "Activation checkpointing: every Nth layer of the stack (ITL_in and ITL_out and "
                                   "TreLM's TRILayer count as layers) keeps only its input in the forward and "
                                   "recomputes the rest in the backward: the same gradients, bit for bit, for a "
                                   "second forward pass of those layers; 1 = every layer, 0 = off. Not with "
                                   "compile: true.")


@dataclass
class CheckpointConfig:
    every_steps: int = doc(1000, "Save every N global steps (and always at the end of each phase); 0 = phase ends "
                                 "only.")
    resume: str = doc("auto", "'auto' = newest complete checkpoint in the run, 'none' = start fresh, 'best' = the "
                              "run's best (checkpoint.keep_best), else a tag.")
    keep_last: int = doc(0, "Keep the newest K complete checkpoints (0 = all); the newest complete one, and the best "
                            "with checkpoint.keep_best, are never deleted.")
    keep_best: bool = doc(False, "Track the checkpoint with the lowest valid/loss (every validation pass; one is "
                                 "saved at that step if the schedule does not): keep_last never deletes it, "
                                 "RUN_DIR/best.json names it, and the tag name 'best' (resume, export, evaluate) "
                                 "resolves to it. Needs data.valid_shards.")
    allow_pickle: bool = doc(False, "Resume from checkpoint files that are not plain data (a pickle that names "
                                    "code); only for a checkpoint you wrote and trust (README: What xpt-ds trusts).")
    rescale_timeout_minutes: float = doc(120.0, "A resume at another world size or ZeRO stage (1, 2, 3) first converts "
                                                "the checkpoint to DeepSpeed's universal layout, on rank 0 while the "
                                                "others wait: a conversion still running after this long is stopped "
                                                "and the run ends with an error saying so.")


@dataclass
class LoggingConfig:
    log_every: int = doc(10, "Steps between host syncs for loss/lr/grad-norm/throughput logging.")
    eval_every: int = doc(500, "Steps between validation passes; 0 = phase ends only.")
    eval_batches: int = doc(20, "Validation micro-batches per pass: the first N global micro-batches of "
                                "optim.micro_batch_size sequences, the same on any number of ranks (what "
                                "evaluate --run --max-batches N --batch-size B scores); 0 = the whole validation set.")
    tensorboard: bool = doc(True, "Write TensorBoard scalars under RUN_DIR/tb.")
    peak_tflops: float = doc(0.0, f"Per-device dense peak TFLOP/s for MFU; 0 = {H100_PEAK_TFLOPS:g} on CUDA (H100 SXM "
                                      "bf16), none on CPU.")
    progress_bar: bool = doc(True, "Show a tqdm progress bar on rank 0 when stderr is a terminal; without one (a log "
                                   "file) or with this off, each log step logs a line with step/total and ETA.")


@dataclass
class GuardConfig:
    max_bad_steps: int = doc(5, "More non-finite (NaN/inf loss or gradient) steps in a row than this: checkpoint "
                                "and halt. Each one is skipped (no update) and counted.")
    loss_spike_ratio: float = doc(1.5, "Warn when a logged loss exceeds this multiple of the median of the last "
                                       "guard.loss_spike_window logged losses; 0 = off.")
    loss_spike_window: int = doc(20, "Logged losses whose median the spike check compares against; checks start "
                                     "once a fifth of them (at least 5, at most all) are logged, anew at a resume.")
    slow_step_ratio: float = doc(3.0, "Multi-rank runs: log a 'slow step' line (with the rank that waited longest "
                                      "for data) when a step takes this multiple of the median of the last "
                                      "guard.slow_step_window steps, at most once per window; 0 = off.")
    slow_step_window: int = doc(50, "Steps whose median step time the slow-step check compares against; checks "
                                    "start once a fifth of them (at least 5, at most all) are timed.")
    early_stop_patience: int = doc(0, "End the current phase early after this many validation passes in a row "
                                      "that do not lower the phase's reference valid/loss by more than "
                                      "guard.early_stop_min_delta (the next phase starts as usual, from step 0 of "
                                      "its schedule); 0 = off. Needs data.valid_shards and logging.eval_every > 0.")
    early_stop_min_delta: float = doc(0.0, "guard.early_stop_patience: the least decrease of valid/loss that counts "
                                           "as an improvement, below the phase's last pass that counted (a slow "
                                           "descent counts once it adds up to more).")
    early_stop_rewind: bool = doc(False, "When early stopping, or the time budget (guard.max_train_minutes), ends a "
                                         "phase whose earlier steps hold the run's best checkpoint, the next phase "
                                         "starts from that checkpoint's exact fp32 weights, not from where the phase "
                                         "stopped (for early stopping, guard.early_stop_patience validation passes "
                                         "later); the data stream goes on where it was. Not for a next phase with "
                                         "start_from or merge. Needs checkpoint.keep_best and "
                                         "guard.early_stop_patience > 0.")
    max_train_minutes: float = doc(0.0, "A wall-clock budget for the training loop (steps, validation passes and "
                                        "saves; not start-up, resume or export), summed over resumes while it is "
                                        "set; 0 = off (no clock reading in the checkpoints). "
                                        "Each phase gets a share of what is left when it starts, in proportion to "
                                        "its planned steps among those of the phases still to run; a phase ends "
                                        "like an early stop (validation pass, checkpoint) at the step whose end "
                                        "the share would not hold (its used seconds plus the attempt's longest "
                                        "step, save included, reach it), and the next phase starts. Where it ends "
                                        "depends on speed, so "
                                        "such a run is not reproducible step for step.")
    collective_timeout_s: float = doc(0.0, "How long a collective (all-reduce, barrier) of the job's ranks waits for "
                                           "the slowest rank before the run fails with a timeout, from the start "
                                           "(ranks that join further apart fail) through every save: shorter ends "
                                           "a hung job sooner; 0 = DeepSpeed's default (the DEEPSPEED_TIMEOUT "
                                           "environment variable, in minutes; 10 unless set). Rank 0's checkpoint "
                                           "conversion (checkpoint.rescale_timeout_minutes) is not bound by it.")
    memory_check: bool = doc(True, "Refuse, before the first engine is built, a phase whose weights, gradients and "
                                   "optimizer state alone (a lower bound: activations come on top) need more "
                                   "memory than a rank has: its GPU's, or on a CPU its share of the node's "
                                   "(docs/cluster.md, \"Memory plan\"). Rank 0 logs every phase's figures either "
                                   "way; false: train anyway.")
    inject_nan_steps: list[int] = doc([], "Testing: rank 0's loss is made NaN at these global steps (1-based).")


@dataclass
class ProfileConfig:
    start_step: int = doc(0, "Profile the run with torch.profiler from this global step (1-based, as the logs count); "
                             "0 = off. Each rank of profile.ranks writes RUN_DIR/profile/steps_S-E/rankR.pt.trace"
                             ".json.gz (a Chrome trace: Perfetto, chrome://tracing) and rankR.txt (where a step's time "
                             "goes: its parts and the operators by self time).")
    steps: int = doc(3, "Steps each profile records.")
    warmup: int = doc(1, "Steps before each profile that the profiler runs but does not record (its own start-up "
                         "falls in them).")
    every: int = doc(0, "Profile again every N steps after profile.start_step (0 = once); at least profile.warmup + "
                        "profile.steps. A profile that would end past the phases' last step is not started.")
    ranks: list[int] = doc([0], "Global ranks that profile, each writing its own files.")
    record_shapes: bool = doc(False, "Record operators' input shapes (the table then groups by them).")
    memory: bool = doc(False, "Record the memory each operator allocates and frees (torch.profiler profile_memory).")
    with_stack: bool = doc(False, "Record the Python stack of each operator (in the trace; larger and slower).")


@dataclass
class TrainConfig:
    run_dir: str = doc("runs/default", "Output directory: config, checkpoints, TensorBoard, logs (not empty).")
    deepspeed: str = doc("ds_configs/zero2_bf16.json", "Engine-only DeepSpeed JSON (see ds_configs/), checked by "
                                                       "DeepSpeed's own parser before the model is built: a key it "
                                                       "does not know is an error.")
    seed: int = doc(0, "Seed of each rank's dropout RNG (offset by rank).")
    compile: bool = doc(False, "torch.compile every layer of the stack, encoder or decoder (the ITLs too), and the LM "
                               "head, in place (parameter names and checkpoints unchanged); ZeRO 0-2 only. "
                               "BENCHMARKS.md has its measured effect on a GPU.")
    model: ModelConfig = doc(None, "Model construction.")
    phases: list[PhaseConfig] = doc([], "List of phases (PhaseConfig).")
    data: DataConfig = doc(None, "Shards, packing and masking.")
    optim: OptimConfig = doc(None, "Optimizer, batch and clipping.")
    activations: ActivationsConfig = doc(None, "What the forward pass keeps for the backward.")
    checkpoint: CheckpointConfig = doc(None, "Saving and resuming.")
    logging: LoggingConfig = doc(None, "Logging, validation and TensorBoard.")
    guard: GuardConfig = doc(None, "Non-finite steps, loss spikes and slow steps.")
    profile: ProfileConfig = doc(None, "torch.profiler traces of chosen steps and ranks.")

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


