"""``guard.collective_timeout_s`` bounds every group of the job, not only the default one: DeepSpeed's clone of the
world group (its engine's collectives: ZeRO's gradient all-reduce, the gradient norm) and the trainer's per-step
exchange (``guards.RankExchange``) too. A group made without ``timeout=`` gets torch's 30 minutes for gloo whatever
the default group's timeout, and a hung rank held the others there for that long (``xpt_ds.runtime.distributed``).

Two ranks (forked, gloo) join as the trainer does (``init_distributed``) and make the groups as it does; rank 1
then stops itself (SIGSTOP: hung, its connections open), and each collective of rank 0 must fail within the
timeout, with the line the trainer says for a hung peer."""
import multiprocessing
import os
import queue
import signal
import time

import pytest
import torch
from conftest import free_port

TIMEOUT_S = 3


def _rank(rank: int, port: int, out) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    import deepspeed.comm as ds_dist
    from deepspeed.utils import groups

    from xpt_ds.runtime.distributed import init_distributed, lost_peer, lost_peer_line
    from xpt_ds.training.guards import RankExchange
    init_distributed(TIMEOUT_S)
    world = groups._clone_world_group()  # what deepspeed.initialize makes for the engine's collectives
    exchange = RankExchange()
    t = torch.ones(4)
    ds_dist.all_reduce(t, group=world)  # both groups work while both ranks are there
    exchange.gather([1.0])
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)  # never continued: the test kills it
        return
    said = {}
    for name, collective in (("deepspeed's world group", lambda: ds_dist.all_reduce(t, group=world)),
                             ("the trainer's exchange", lambda: exchange.gather([2.0]))):
        start = time.monotonic()
        try:
            collective()
            said[name] = (time.monotonic() - start, None, "completed with rank 1 stopped")
        except Exception as e:  # noqa: BLE001  what the collective raises is what is checked
            said[name] = (time.monotonic() - start, lost_peer(e), lost_peer_line(e, None))
    out.put(said)
    out.close()
    out.join_thread()  # sent before the exit
    os._exit(0)  # not dist.destroy_process_group: its barrier would wait on the stopped rank


def test_a_stopped_rank_fails_every_collective_of_the_others_within_the_timeout():
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        limit = 30 + 4 * TIMEOUT_S  # joining, then two collectives that fail after TIMEOUT_S each
        wait, said = time.monotonic() + limit, None
        while said is None:
            try:
                said = out.get(timeout=1)
            except queue.Empty:
                if not procs[0].is_alive():
                    pytest.fail(f"rank 0 ended (exit code {procs[0].exitcode}) without an answer; its output says why")
                if time.monotonic() > wait:  # the old code: torch's 30 minutes, in a group made without a timeout
                    pytest.fail(f"no answer from rank 0 {limit} s after the start: a collective waited past the "
                                f"timeout ({TIMEOUT_S} s) for the stopped rank")
        for name, (took, lost, line) in said.items():
            assert lost, f"{name}: {line}"
            assert line.startswith("a collective of this job timed out waiting for another rank"), f"{name}: {line}"
            assert TIMEOUT_S * 0.9 <= took <= TIMEOUT_S + 10, f"{name}: failed after {took:.1f} s"
        assert len(said) == 2
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()  # SIGKILL: also ends the stopped rank
            p.join(10)
