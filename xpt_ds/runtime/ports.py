"""A rendezvous port for a job started on this machine (a single-process run, a sweep's launcher, a benchmark
worker) that no other process is likely to take before the job's store listens on it.

Binding port 0 and closing the socket hands back a port from the kernel's ephemeral range, and the kernel hands
the same range out again to whatever connects or binds port 0 next: gloo's listeners and the stores' client
sockets of every other job on the machine. Between the pick and the store's ``listen`` one of them can take it,
and the job dies with ``EADDRINUSE`` (seen with two test workers training beside each other). A port drawn at
random below (or above) the ephemeral range is never handed out that way; the bind test only rules out ports
something listens on now.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below this, well-known services and the ports people pick by hand
TRIES = 50


def ephemeral_range(path: Path = EPHEMERAL_RANGE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux); the IANA range where there is no such file."""
    try:
        low, high = (int(x) for x in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 49152, 65535


def outside_range(low: int, high: int) -> tuple[int, int] | None:
    """The larger of the port ranges below ``[low, high]`` (from LOWEST) and above it (inclusive bounds); None
    where neither holds 1,000 ports."""
    below, above = (LOWEST, low - 1), (high + 1, 65535)
    best = max(below, above, key=lambda r: r[1] - r[0])
    return best if best[1] - best[0] >= 1000 else None


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing listens on now, outside the ephemeral range where the machine leaves room
    for one; else (a range that covers nearly everything) one the kernel picks."""
    rng = random.Random()  # seeded from os.urandom: never the training RNGs' state
    span = outside_range(*ephemeral_range())
    for _ in range(TRIES if span else 0):
        port = rng.randint(*span)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
