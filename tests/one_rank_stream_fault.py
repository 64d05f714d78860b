"""Run under a launcher: ``xpt_ds.cli.train`` with rank 1's data streams failing, as they do when a shard is corrupt in
that node's copy only (tests/runtime/test_faults.py). Every other rank builds its streams from the real shards."""
import atexit
import os
import sys
import time

from xpt_ds.data.shards import DataError
from xpt_ds.cli.train import main
from xpt_ds.training import streams

if os.environ.get("RANK") == "1":
    def _corrupt_here(*args, **kwargs):
        raise DataError("corrupt shard /node1/train-000000.tar: truncated in this node's copy")
    streams.build_streams = _corrupt_here
    # On one node the launcher kills the other ranks as soon as this one exits; a rank on another node would
    # live on. Exit late, so that the test sees what the other ranks print by themselves.
    atexit.register(time.sleep, 3)

if __name__ == "__main__":
    sys.exit(main([a for a in sys.argv[1:] if not a.startswith("--local_rank")]))
