"""Run under the deepspeed launcher (or, one rank, ``run_main``): load a run's newest checkpoint into the trainer's own engine and save
fp32 logits of the engine's model on fixed input ids (rank 0 writes OUT)."""
import sys

import deepspeed
import torch

from xpt_ds.config import load_config
from xpt_ds.runtime.distributed import init_distributed
from xpt_ds.training.build import build_trainer


def save_logits(config: str, out: str) -> None:
    init_distributed()  # as xpt_ds.cli.train does: unlinks DeepSpeed's CPU shared-memory buffer names
    trainer = build_trainer(load_config(config))
    ids = torch.load(out + ".ids.pt")
    trainer.engine.eval()
    with torch.no_grad():
        logits = trainer.engine.module.hf(input_ids=ids.to(trainer.device)).logits.float().cpu()
    if deepspeed.comm.get_rank() == 0:
        torch.save(logits, out)
    deepspeed.comm.destroy_process_group()


def main(argv: list[str]) -> int:
    """``CONFIG OUT`` (the launcher's ``--local_rank`` dropped); ``run_main("trainer_logits", argv, env)`` runs a
    one-rank world in a fork, with RANK, WORLD_SIZE and MASTER_* in ``env``."""
    save_logits(*[a for a in argv if not a.startswith("--local_rank")])
    return 0


if __name__ == "__main__":
    from xpt_ds.runtime.process_exit import exit_process
    exit_process(main(sys.argv[1:]))  # as xpt-ds's commands end (a 2-rank ZeRO-3 script's teardown once aborted)
