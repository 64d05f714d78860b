"""The ``xpt-ds`` command: one subcommand per entry point, each the ``main`` of its module, imported only when
run (so ``xpt-ds --help`` is instant). ``python -m xpt_ds.cli.<name>`` runs the same ``main``; the launchers
(``deepspeed --module xpt_ds.cli.train``, ``torchrun -m``, ``srun python -m``) use that form."""
from __future__ import annotations

import importlib
import sys

from xpt_ds import __version__

COMMANDS = {  # name -> (module, one line)
    "train": ("xpt_ds.cli.train", "post-train a model (XPT and every baseline) from a run config; resumes"),
    "export": ("xpt_ds.cli.export", "a checkpoint -> a Hugging Face model directory stock transformers loads"),
    "evaluate": ("xpt_ds.cli.evaluate", "PPL, Hits@k, MRR, bits per char/word on held-out shards (002 Table 2)"),
    "finetune": ("xpt_ds.cli.finetune", "fine-tune any HF encoder on a labelled task, once per seed (002 Table 3)"),
    "sweep": ("xpt_ds.cli.sweep", "every method at every data size: train, evaluate, fine-tune, report"),
    "status": ("xpt_ds.cli.status", "where runs stand: running, died (no heartbeat since ...), or how they stopped"),
    "probe": ("xpt_ds.cli.probe", "where the source language goes: the source vocabulary swapped back in"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {line}" for name, (_, line) in COMMANDS.items())
    return (f"usage: xpt-ds COMMAND [ARGS ...]\n\nxpt-ds {__version__}: cross-lingual post-training of English "
            f"masked and causal language models on DeepSpeed.\n\ncommands:\n{rows}\n\n'xpt-ds COMMAND --help' "
            "lists a command's options. Corpora and embeddings: xpt-data --help.")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"xpt-ds {__version__}")
        return 0
    if argv[0] not in COMMANDS:
        print(f"error: unknown command '{argv[0]}'; valid: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:])


def run() -> None:
    """The ``xpt-ds`` console script: ``main``, then the process ends as a command's does
    (``xpt_ds.runtime.process_exit``)."""
    from xpt_ds.runtime.process_exit import exit_process
    exit_process(main())


if __name__ == "__main__":
    run()
