"""A one-node launcher whose stops reach the training ranks:
``python -m xpt_ds.runtime.launch_guard [--grace S] -- LAUNCHER ...`` (``launch/single_node.sh`` execs it).

The deepspeed launcher on one node dies of a SIGTERM (and its ``launch.py`` of a SIGUSR1) and leaves its ranks
training: a container's PID 1 or ``kill PID`` signals the script alone. So the launcher runs tethered
(``xpt_ds.runtime.tether`` with ``--ranks xpt_ds.cli.train``): each SIGTERM, SIGINT, SIGUSR1 or SIGHUP this
process gets is passed to the tether, which passes it to the ranks (SIGHUP as SIGTERM), so the run checkpoints and
exits 124 (preempted) or 130 (interrupted). The launcher is in a session of its own, out of the terminal's reach:
a Ctrl-C reaches the ranks once, through here (a second Ctrl-C, passed on too, stops them without a checkpoint, as
the trainer does). If this process dies in any way, ``kill -9`` included, the tether stops the ranks as for a
SIGTERM. ``--grace`` seconds after the first stop (default 1800: a large model's save on a slow file system) what
is left is killed, and at once if nothing has started a rank yet. The exit status is the launcher's (128 + N for a
signal N; 137 when the tether killed it)."""
from __future__ import annotations

import argparse
import signal
import sys

from xpt_ds.errors import ArgumentParser
from xpt_ds.runtime.tether import tethered

RANKS = "xpt_ds.cli.train"  # the processes a stop goes to (they checkpoint on it); a sweep's stages' too
STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)


def run(cmd: list[str], grace_s: float) -> int:
    with tethered(cmd, ranks=RANKS, grace_s=grace_s) as proc:
        def forward(sig: int, frame) -> None:
            if proc.poll() is None:
                proc.send_signal(sig)

        for sig in STOPS:
            signal.signal(sig, forward)
        code = proc.wait()
    return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    p = ArgumentParser(prog="python -m xpt_ds.runtime.launch_guard", description=__doc__.splitlines()[0])
    p.add_argument("--grace", type=float, default=1800.0, metavar="S",
                   help="seconds from the first stop signal until what is left of the job is killed (default 1800)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- LAUNCHER ARGS...")
    a = p.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        p.error("no launcher command after --")
    return run(cmd, a.grace)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
