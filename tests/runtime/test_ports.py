"""xpt_ds.runtime.ports: rendezvous ports outside the kernel's ephemeral range, which every other job's sockets
draw from (a port picked there was taken by a neighbouring test's job before the store listened: EADDRINUSE)."""
import socket

from xpt_ds.runtime import ports


def test_a_port_is_free_and_outside_the_ephemeral_range():
    low, high = ports.ephemeral_range()
    picked = {ports.free_port() for _ in range(20)}
    assert len(picked) > 1  # drawn at random, not one fixed port for every job
    for port in picked:
        assert ports.LOWEST <= port < low or high < port <= 65535, (port, low, high)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # nothing listens there


def test_ranges_outside_the_ephemeral_one(tmp_path):
    assert ports.outside_range(32768, 60999) == (10_000, 32767)
    assert ports.outside_range(1024, 40000) == (40001, 65535)  # the larger side
    assert ports.outside_range(1024, 65000) is None  # nearly everything is ephemeral: the kernel picks
    f = tmp_path / "range"
    f.write_text("20000\t64000\n")
    assert ports.ephemeral_range(f) == (20000, 64000)
    assert ports.outside_range(20000, 64000) == (10_000, 19999)
    assert ports.outside_range(11000, 65000) is None  # 999 ports below, 534 above: too few to draw from
    assert ports.ephemeral_range(tmp_path / "missing") == (49152, 65535)


def test_with_no_room_outside_it_the_kernel_picks(monkeypatch):
    low, high = ports.ephemeral_range()  # the kernel's own, from which it picks
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 65535))
    port = ports.free_port()
    assert low <= port <= high
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_port_something_listens_on_is_passed_over(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        draws = iter([busy, busy, busy + 1 if busy < 65535 else busy - 1])
        monkeypatch.setattr(ports.random.Random, "randint", lambda self, lo, hi: next(draws))
        assert ports.free_port() != busy



def test_a_launch_whose_store_port_was_taken_is_told_apart_and_runs_again(tmp_path):
    """torchrun's agent fails before starting any rank when its --master_port is taken between free_port's check
    and its listen (the 2026-11-29 CI run, another worker's process on the port): tests.processes.launch runs
    such a job again on a new port; any other failure is returned as it is."""
    import subprocess
    import sys

    from processes import _store_port_taken
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                               "--master_port", str(port), "--no-python", "true"], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
    assert done.returncode != 0 and _store_port_taken(done.stderr), done.stderr[-2000:]
    assert not _store_port_taken("RuntimeError: config key 'model.source' ...\nEADDRINUSE in a rank's gloo")
