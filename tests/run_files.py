"""Readers of what a run leaves in its directory (checkpoint markers, frozen weights, kept phase ends,
metrics.jsonl), for the tests that check it; conftest re-exports them."""
from __future__ import annotations

from pathlib import Path


def read_marker(ckpt_root: Path, tag: str) -> dict:
    """What a checkpoint's COMPLETE marker records: global_step, world_size, zero_stage."""
    from xpt_ds.checkpoint.tags import read_marker as read
    return read(Path(ckpt_root) / tag)


def twin_of(model):
    """A second model of ``model``'s config holding copies of its values: the skeleton a resume, a phase hand-over
    and an export fill (xpt_ds.model.skeleton), assigned every parameter."""
    from xpt_ds.model.skeleton import assign, skeleton
    params = dict(model.named_parameters())
    return assign(skeleton(model.config), lambda n: params[n].detach().clone())


def read_frozen(tag_dir: Path) -> dict:
    """A checkpoint's frozen fp32 weights (module names: ``hf.`` first), as a dict."""
    from safetensors.torch import load_file
    return load_file(Path(tag_dir) / "frozen_fp32.safetensors")


def read_phase_end(ckpt_root: Path, name: str) -> dict:
    """A kept phase end as {'weights': {module name: fp32}, 'data': ..., 'digest': ...}."""
    import json

    from safetensors.torch import load_file
    base = Path(ckpt_root) / "phase_ends"
    return {"weights": load_file(base / f"{name}.safetensors"), **json.loads((base / f"{name}.json").read_text())}


def read_metrics(run_dir: Path) -> dict[int, dict]:
    import json
    rows: dict[int, dict] = {}
    for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row["step"], {}).update(row)
    return rows


def logged_since(metrics: Path, since: float) -> list[int]:
    """The steps of metrics.jsonl's rows logged at or after time ``since``. A resume rewrites the file (rows past
    its checkpoint move to metrics.superseded.jsonl), so byte offsets or line counts into it do not last."""
    import json
    steps = []
    for line in (metrics.read_text().splitlines() if metrics.exists() else []):
        try:
            row = json.loads(line)
        except ValueError:  # the line being written
            continue
        if row["time"] >= since:
            steps.append(row["step"])
    return steps
