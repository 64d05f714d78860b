"""Run under the deepspeed launcher: load a run's newest checkpoint into the trainer's own engine and save
fp32 logits of the engine's model on fixed input ids (rank 0 writes OUT). ``main([CONFIG, OUT])`` also runs in
ranks forked by ``conftest.run_main(..., nproc=2)``."""
import sys

import deepspeed
import torch

from xpt_ds.config import load_config
from xpt_ds.training.trainer import Trainer


def main(argv: list[str]) -> int:
    config, out = [a for a in argv if not a.startswith("--local_rank")]
    deepspeed.init_distributed()
    trainer = Trainer(load_config(config))
    trainer.setup()
    ids = torch.load(out + ".ids.pt")
    trainer.engine.eval()
    with torch.no_grad():
        logits = trainer.engine.module.hf(input_ids=ids.to(trainer.device)).logits.float().cpu()
    if deepspeed.comm.get_rank() == 0:
        torch.save(logits, out)
    deepspeed.comm.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
