"""``xpt_ds.cli.train``'s own ``main`` with one fault injected (tests/runtime/test_train_ends.py runs it in a forked
child, ``processes.run_main``): ``STOP_AT_START=1`` sends this process SIGTERM as it joins its process group, before
the trainer watches for stop signals (a Slurm job cancelled while its ranks start); ``RAISE_AT=N`` raises a
RuntimeError that is no lost peer (a host allocation that failed) in the N-th step; ``NOFILE=SOFT:HARD`` sets the
open-file limit (``ulimit -n``) at the start, each a number or ``+N``, the files this process has open then plus N;
``NOFILE_AT_STEP=N:SOFT:HARD`` as the N-th step starts."""
import os
import signal
import sys

from xpt_ds.cli import train
from xpt_ds.runtime import distributed
from xpt_ds.training.trainer import Trainer


def set_limit(limit: str) -> None:
    """The open-file limit as SOFT:HARD, each a number or +N: the files open now plus N."""
    import resource
    now = len(os.listdir("/proc/self/fd"))
    soft, hard = (now + int(v[1:]) if v.startswith("+") else int(v) for v in limit.split(":"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def main(argv: list[str]) -> int:
    if "NOFILE" in os.environ:
        set_limit(os.environ["NOFILE"])
    if "NOFILE_AT_STEP" in os.environ:  # the limit as the first step starts: N:SOFT:HARD, each as NOFILE's
        at, limit = os.environ["NOFILE_AT_STEP"].split(":", 1)
        limited = Trainer.train_step

        def train_step(self):
            if self.state.global_step + 1 == int(at):
                set_limit(limit)
            return limited(self)

        Trainer.train_step = train_step
    if os.environ.get("STOP_AT_START") == "1":
        init = distributed.init_distributed

        def init_distributed(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs at the next bytecode
            return init(*args, **kwargs)

        distributed.init_distributed = init_distributed
    if "RAISE_AT" in os.environ:
        at, step = int(os.environ["RAISE_AT"]), Trainer.train_step

        def train_step(self):
            if self.state.global_step + 1 == at:
                raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't "
                                   "allocate memory: you tried to allocate 1024 bytes.\nsecond line")
            return step(self)

        Trainer.train_step = train_step
    return train.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
