"""RUN_DIR/status.json: where the run stands, for a person (`cat`) or a script (`json.load`). Rank 0 only,
rewritten atomically at every log step, checkpoint and exit."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


def write_status(run_dir: Path, **fields) -> None:
    status = {"updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **fields}
    tmp = run_dir / "status.json.tmp"
    tmp.write_text(json.dumps(status, indent=2) + "\n")
    os.replace(tmp, run_dir / "status.json")
