"""Run under a launcher: ``xpt_ds.cli.train`` where rank 1 sees another copy of one folder of shards, as a node whose
own copy of the corpus is another version does (tests/runtime/test_faults.py). Rank 1 runs again in a mount namespace of
its own, in which the folder OTHER_COPY is bind-mounted over the folder SHARDS; every other rank reads SHARDS."""
import os
import sys

if os.environ.get("RANK") == "1" and not os.environ.get("XPT_OTHER_COPY_MOUNTED"):
    os.environ["XPT_OTHER_COPY_MOUNTED"] = "1"
    mount = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh",
                          os.environ["OTHER_COPY"], os.environ["SHARDS"], sys.executable, *sys.argv])

from xpt_ds.cli.train import main  # noqa: E402 (after the re-execution)

if __name__ == "__main__":
    sys.exit(main([a for a in sys.argv[1:] if not a.startswith("--local_rank")]))
