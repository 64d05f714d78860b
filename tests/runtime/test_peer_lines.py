"""The line a rank says when a collective fails (``xpt_ds.runtime.distributed.lost_peer_line``): a peer that is
gone, or a wait longer than the job's collective timeout, each named as what it is."""
from xpt_ds.runtime.distributed import lost_peer, lost_peer_line


def test_a_gloo_timeout_reads_as_a_timeout_and_a_closed_connection_as_a_lost_rank():
    timeout = RuntimeError("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms "
                           "for recv operation to complete")
    closed = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                          "[127.0.0.1]:24477")
    assert lost_peer(timeout) and lost_peer(closed)
    assert lost_peer_line(timeout, "global_step000000003") == (
        "a collective of this job timed out waiting for another rank (Timed out waiting 10000ms for recv operation to "
        "complete): a rank hung, or works alone for longer than guard.collective_timeout_s allows, and its own output "
        "says where; the same command resumes from checkpoint global_step000000003")
    assert lost_peer_line(closed, None) == (
        "lost another rank of this job (Connection closed by peer [127.0.0.1]:24477): a rank or node died, and its "
        "own output says why; the same command resumes from the newest complete checkpoint")
