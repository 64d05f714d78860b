"""A fine-tuning task's files, read and checked (columns, labels, relation records) before any model loads: no
torch, so ``xpt-ds sweep`` checks its ``--finetune-*`` files, and its ``--dry-run`` runs, without one."""
from __future__ import annotations

from typing import TYPE_CHECKING

from xpt_ds.finetuning.data import FinetuneError, build_labels, label_ids, read_examples
from xpt_ds.finetuning.relation import read_relation_examples, relation_labels

if TYPE_CHECKING:
    from xpt_ds.finetuning.config import FinetuneConfig


def read_splits(cfg: FinetuneConfig) -> tuple[dict, list, dict]:
    """(examples, labels, label ids) of every split file, each checked (columns, labels the training file lacks,
    ...), and ``--metric`` against the labels: no model needed, so a sweep checks its fine-tuning files before its
    first run trains."""
    cols, files = cfg.columns(), {"train": cfg.train, "valid": cfg.valid, "test": cfg.test}
    if cfg.task == "relation":
        examples = {name: read_relation_examples(path, f"--{name}", cfg.label_column)
                    for name, path in files.items() if path}
        labels = relation_labels(examples["train"], cfg.no_relation_label, cfg.train)
    else:
        examples = {name: read_examples(path, f"--{name}", cfg.task, cols) for name, path in files.items() if path}
        labels = build_labels(examples["train"], cfg.task, cfg.train)
    if cfg.metric == "binary_f1" and len(labels) != 2:  # metrics.classification_metrics gives it for two alone
        shown = ", ".join(labels[:5]) + (", ..." if len(labels) > 5 else "")
        raise FinetuneError(f"--metric binary_f1 needs two labels, and --train {cfg.train} has {len(labels)} "
                            f"({shown}); use macro_f1 or accuracy")
    return examples, labels, {name: label_ids(exs, labels, cfg.task) for name, exs in examples.items()}
