"""eflomal (Östling & Tiedemann 2016) as an optional external aligner.

eflomal is GPL-3: it is only ever run as a program (``eflomal-align``, installed by ``pip install eflomal``),
never imported, so nothing of it links into this package. Pieces are passed as their integer ids, so a piece
that contains a space cannot break its whitespace tokenisation. Its forward links give t2s (each target piece
at most one source piece), its reverse links s2t; both files are written ``source-target`` (its README), with
no symmetrisation. eflomal samples, so unlike the built-in aligner its output can differ between runs.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from data_tools.errors import PrepareError
from data_tools.pairs.align import Direction

PROGRAM = "eflomal-align"


def find_eflomal() -> str:
    path = shutil.which(PROGRAM)
    if path is None:
        raise PrepareError(f"--aligner eflomal: {PROGRAM} not found on PATH (pip install eflomal; it is GPL-3 and "
                           "run only as a separate program), or use --aligner fast_align")
    return path


def _write(path: Path, side: list[np.ndarray]) -> None:
    path.write_text("".join(" ".join(map(str, ids.tolist())) + "\n" for ids in side), encoding="utf-8")


def _read_links(path: Path, lengths: list[int], reverse: bool) -> list[np.ndarray]:
    """``i-j`` links (i: source, j: target) -> per pair, for each piece of the generated side, its link."""
    lines = path.read_text(encoding="utf-8").split("\n")[:len(lengths)]
    if len(lines) != len(lengths):
        raise PrepareError(f"{PROGRAM} wrote {len(lines)} alignment lines for {len(lengths)} pairs")
    out = []
    for line, n in zip(lines, lengths):
        links = np.full(n, -1, dtype=np.int32)
        for link in line.split():
            i, j = map(int, link.split("-"))
            gen, cond = (i, j) if reverse else (j, i)
            if links[gen] < 0:  # a generated piece has one link in these models; keep the first if not
                links[gen] = cond
        out.append(links)
    return out


def align_with_eflomal(source: list[np.ndarray], target: list[np.ndarray],
                       extra_args: tuple[str, ...] = ()) -> tuple[Direction, Direction]:
    program = find_eflomal()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eflomal-") as tmp:
        tmp = Path(tmp)
        _write(tmp / "source.txt", source)
        _write(tmp / "target.txt", target)
        cmd = [program, "-s", str(tmp / "source.txt"), "-t", str(tmp / "target.txt"), "-f", str(tmp / "fwd"),
               "-r", str(tmp / "rev"), "--overwrite", *extra_args]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise PrepareError(f"{PROGRAM} failed with status {proc.returncode}: {tail}")
        t2s = _read_links(tmp / "fwd", [len(t) for t in target], reverse=False)
        s2t = _read_links(tmp / "rev", [len(s) for s in source], reverse=True)
    seconds = time.perf_counter() - t0
    # one run gives both directions: its time is booked on t2s
    return Direction(t2s, None, [], seconds), Direction(s2t, None, [], 0.0)
