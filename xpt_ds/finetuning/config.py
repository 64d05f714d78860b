"""Fine-tuning's config: ``FinetuneConfig`` (every field a ``--flag`` of ``python -m xpt_ds.cli.finetune``), the
task presets of 002 Table A2 and the checks that need no files."""
from __future__ import annotations

from dataclasses import dataclass

from xpt_ds.config import doc
from xpt_ds.errors import ArgumentParser
from xpt_ds.finetuning.data import TASKS, Columns, FinetuneError

# 002 Table A2 ("Hyperparameters used for downstream evaluations"): batch size 32 and warmup proportion 0.06
# for every task; learning rate 1e-5 (PAWS-X, KQP) or 5e-5 (KorSTS, KHS); 15 epochs (PAWS-X) or 10. Metrics
# as 002 §4.3 scores them. Column names follow each dataset's public release (KHS: kocohub/korean-hate-speech
# labeled/*.tsv); flags given on the command line override a preset.
PRESETS = {
    "paws-x": dict(task="classification", lr=1e-5, epochs=15, batch_size=32, warmup_ratio=0.06,
                   text_column="sentence1", text_pair_column="sentence2", label_column="label", metric="accuracy"),
    "korsts": dict(task="regression", lr=5e-5, epochs=10, batch_size=32, warmup_ratio=0.06,
                   text_column="sentence1", text_pair_column="sentence2", label_column="score", metric="spearman"),
    "kqp": dict(task="classification", lr=1e-5, epochs=10, batch_size=32, warmup_ratio=0.06,
                text_column="question1", text_pair_column="question2", label_column="is_duplicate", metric="accuracy"),
    "khs": dict(task="classification", lr=5e-5, epochs=10, batch_size=32, warmup_ratio=0.06,
                text_column="comments", label_column="hate", metric="macro_f1"),
    # KLUE-RE (001 §5.2, OCR-damaged: fine-tuning with batch 32, lr 1e-5, 15 epochs; 001 gives no warmup, so
    # 000 Table 6's 0.1 for KLUE-RE, whose other values are 3 epochs, batch 32, lr 5e-5). KLUE-RE's release
    # names the fields (sentence, subject_entity, object_entity, label); 001 scores micro F1 without no_relation.
    "klue-re": dict(task="relation", lr=1e-5, epochs=15, batch_size=32, warmup_ratio=0.1, label_column="label",
                    no_relation_label="no_relation", metric="micro_f1"),
}
TASK_METRICS = {"classification": ("accuracy", "macro_f1", "binary_f1"), "regression": ("spearman", "pearson"),
                "token_classification": ("entity_f1", "entity_precision", "entity_recall"),
                "relation": ("micro_f1", "auprc", "accuracy")}
# The rest is RoBERTa's GLUE recipe, which 002 §4.4 follows except for Table A2 (Liu et al. 2019, Table 10;
# fairseq examples/roberta/README.glue.md): AdamW betas (0.9, 0.98), eps 1e-6, weight decay 0.1, linear decay.
# Not its gradient clip: that recipe has none (--clip-norm 0.0), where BERT's fine-tuning (optimization.py,
# clip_by_global_norm 1.0) and Hugging Face Trainer (max_grad_norm 1.0) clip at 1.0, which bounds the step a loss
# spike takes; --grad-clip 0 is RoBERTa's recipe exactly.
ADAM_BETAS, ADAM_EPS = (0.9, 0.98), 1e-6
# Model types whose position ids start after the pad id (see xpt_ds.model.build.FAMILIES).
OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert")
PRECISIONS = ("auto", "fp32", "bf16")  # xpt_ds.finetuning.precision


@dataclass
class FinetuneConfig:
    model: str = doc("", "Hugging Face encoder or decoder: local directory (e.g. an xpt_ds.cli.export output) or hub "
                         "id.")
    train: str = doc("", "Training examples: .csv, .tsv or .jsonl (relation: KLUE-RE .json or .jsonl).")
    test: str = doc("", "Test examples, same format; scored once per seed.")
    valid: str = doc("", "Validation examples; if given, test scores come from the best-validation epoch.")
    out: str = doc("finetune_out", "Output directory for results.json.")
    preset: str = doc("", f"Task preset (002 Table A2's; klue-re: 001's): {', '.join(PRESETS)} (empty: the "
                          "defaults below).")
    task: str = doc("classification", f"One of {', '.join(TASKS)}.")
    text_column: str = doc("text", "Column with the (first) sentence.")
    text_pair_column: str = doc("", "Column with the second sentence of a pair; empty for single sentences.")
    label_column: str = doc("label", "Column with the class name or the score.")
    tokens_column: str = doc("tokens", "token_classification: words (JSON list, or space-separated string).")
    tags_column: str = doc("tags", "token_classification: one IOB2 tag per word, same forms.")
    no_relation_label: str = doc("no_relation", "relation: the label micro F1 leaves out (KLUE-RE's).")
    seeds: list[int] = doc([1, 2, 3, 4, 5], "One fine-tuning run per seed (002 Table 3 uses 10).")
    lr: float = doc(5e-5, "Peak learning rate (Table A2: 1e-5 PAWS-X/KQP, 5e-5 KorSTS/KHS).")
    batch_size: int = doc(32, "Examples per optimizer step (Table A2).")
    epochs: int = doc(10, "Training epochs (Table A2: 15 PAWS-X, 10 the others).")
    warmup_ratio: float = doc(0.06, "Linear warmup as a fraction of all steps, then linear decay to 0 (Table A2).")
    weight_decay: float = doc(0.1, "AdamW weight decay, not on biases and LayerNorm (RoBERTa's GLUE recipe).")
    grad_clip: float = doc(1.0, "Gradient-norm clip (the global L2 norm of all gradients); 0 disables. 1.0 is BERT's "
                                "fine-tuning clip and Hugging Face Trainer's max_grad_norm; RoBERTa's GLUE recipe "
                                "uses none (fairseq --clip-norm 0.0).")
    max_length: int = doc(512, "Pieces per example, truncated; capped by the model's positions.")
    patience: int = doc(0, "With --valid: stop after this many epochs without improvement; 0 runs every epoch.")
    metric: str = doc("", "Metric for model selection and the headline; empty: accuracy, spearman, entity_f1 or "
                          "micro_f1 (relation).")
    save_model: bool = doc(False, "Also save the first seed's fine-tuned model and its tokenizer to OUT/model "
                                  "(relation: with the entity markers and the head; see relation_model.py).")
    lora_rank: int = doc(0, "LoRA rank on every linear map of a decoder's layers (Llama layout: q_proj ... down_proj; "
                            "GPT-2: c_attn, c_proj, c_fc); 0: full fine-tuning. Only the LoRA updates and the new "
                            "task head train; --save-model merges them into a stock model.")
    lora_alpha: float = doc(16.0, "LoRA scale numerator: an update is B·A·alpha/rank (with --lora-rank).")
    activation_checkpointing: bool = doc(False, "Keep only each layer's input in the forward and compute the rest "
                                                "again in the backward: less memory for a large model or long "
                                                "rows, the same gradients, more compute.")
    device: str = doc("auto", "auto (CUDA if available), cpu or cuda.")
    precision: str = doc("auto", "fp32 weights always; the forward and backward in fp32 (fp32) or under bf16 autocast "
                                 "(bf16); auto: bf16 on CUDA, fp32 on the CPU. Under autocast with --lora-rank, the "
                                 "frozen weights LoRA adapts are stored in bf16: the bits autocast computes with, in "
                                 "half the memory or less.")
    trust_remote_code: bool = doc(False, "Run Python the model directory ships that is not this xpt-ds's own "
                                         "export code (only for a model you trust).")

    def columns(self) -> Columns:
        return Columns(self.text_column, self.text_pair_column, self.label_column, self.tokens_column,
                       self.tags_column)


REQUIRED = ("model", "train", "test")


def validate(cfg: FinetuneConfig) -> None:
    """Checks that need no files; fills in the task's default ``metric``."""
    for name in REQUIRED:
        if not getattr(cfg, name):
            raise FinetuneError(f"--{name} is required")
    if cfg.task not in TASKS:
        raise FinetuneError(f"--task '{cfg.task}' is unknown; valid: {', '.join(TASKS)}")
    cfg.metric = cfg.metric or TASK_METRICS[cfg.task][0]
    if cfg.metric not in TASK_METRICS[cfg.task]:
        raise FinetuneError(f"--metric '{cfg.metric}' is not a {cfg.task} metric; "
                            f"valid: {', '.join(TASK_METRICS[cfg.task])}")
    checks = {"lr": (cfg.lr > 0, "> 0"), "batch_size": (cfg.batch_size >= 1, ">= 1"),
              "epochs": (cfg.epochs >= 1, ">= 1"), "warmup_ratio": (0 <= cfg.warmup_ratio < 1, "in [0, 1)"),
              "weight_decay": (cfg.weight_decay >= 0, ">= 0"), "grad_clip": (cfg.grad_clip >= 0, ">= 0"),
              "max_length": (cfg.max_length >= 8, ">= 8"), "patience": (cfg.patience >= 0, ">= 0"),
              "lora_rank": (cfg.lora_rank >= 0, ">= 0"), "lora_alpha": (cfg.lora_alpha > 0, "> 0"),
              "seeds": (len(cfg.seeds) >= 1 and all(0 <= s < 2**64 for s in cfg.seeds),
                        "at least one, each in [0, 2**64)"), "device": (cfg.device in ("auto", "cpu", "cuda"),
                                                                          "auto, cpu or cuda"),
              "precision": (cfg.precision in PRECISIONS, ", ".join(PRECISIONS))}
    twice = sorted({s for s in cfg.seeds if cfg.seeds.count(s) > 1})
    if twice:
        raise FinetuneError(f"--seeds gives {twice[0]} more than once: a seed repeated is the same run, counted as "
                            "another")
    bad = [k for k, (ok, _) in checks.items() if not ok]
    if bad:
        raise FinetuneError(f"--{bad[0].replace('_', '-')} has a bad value: {getattr(cfg, bad[0])!r} (must be "
                            f"{checks[bad[0]][1]})")
    if cfg.patience and not cfg.valid:  # it counts epochs without a better validation score
        raise FinetuneError(f"--patience {cfg.patience} needs --valid: it stops after that many epochs without a "
                            "better validation score")
    if cfg.lora_rank and cfg.task == "relation":  # its entity markers are new rows of the frozen embedding matrix
        raise FinetuneError("--lora-rank: relation fine-tunes the embedding rows of its entity markers, which LoRA "
                            "leaves frozen; fine-tune relations without it")
    if cfg.device == "cuda":
        import torch  # here, not at the top: ``--help`` and the sweep's plan need no torch
        if not torch.cuda.is_available():
            raise FinetuneError("--device cuda, but CUDA is not available")


def parse_flags(argv: list[str], description: str | None = None) -> FinetuneConfig:
    """``xpt-ds finetune``'s flags as a config: defaults < ``--preset`` < flags given; every flag's help is its
    field's. Also how a sweep reads the fine-tuning flags it passes on (``sweeps.plan.check_finetune``)."""
    from xpt_ds.config.flags import add_flags
    parser = ArgumentParser(prog="xpt-ds finetune", description=description)
    add_flags(parser, FinetuneConfig, required=REQUIRED)
    given = vars(parser.parse_args(argv))
    preset = given.get("preset", "")
    if preset and preset not in PRESETS:
        raise FinetuneError(f"--preset '{preset}' is unknown; valid: {', '.join(PRESETS)}")
    return FinetuneConfig(**{**PRESETS.get(preset, {}), **given})
