"""``xpt_ds.cli.train``'s own ``main`` with Ctrl-C pressed twice (tests/runtime/test_preemption.py runs it in a
forked child, ``processes.run_main``): the first SIGINT after step ``CTRL_C_AT``, the second inside the checkpoint save the first
asks for, after DeepSpeed has written that tag's files and before its frozen weights and COMPLETE marker."""
import os
import signal
import sys

from xpt_ds.cli import train
from xpt_ds.checkpoint import store as checkpoint
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.training.trainer import Trainer


def main(argv: list[str]) -> int:
    at = int(os.environ["CTRL_C_AT"])
    step, save_frozen = Trainer.train_step, checkpoint._save_frozen

    def train_step(self):
        out = step(self)
        if self.state.global_step == at:
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs at the next bytecode, as at a terminal
        return out

    def _save_frozen(frozen, tag_dir, rank):
        if tag_dir.name == tag_for(at):
            os.kill(os.getpid(), signal.SIGINT)  # the second: KeyboardInterrupt here, mid-save
        return save_frozen(frozen, tag_dir, rank)

    Trainer.train_step, checkpoint._save_frozen = train_step, _save_frozen
    return train.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
