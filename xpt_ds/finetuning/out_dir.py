"""A fine-tuning run's ``--out`` folder: ``--save-model``'s model staged beside the results until they are written,
an earlier run's results kept beside the new ones, and after a failure nothing of what the run wrote (nor a folder
it made), and everything that was there before in its place."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from xpt_ds.io.paths import write_error, write_text_atomic


class OutDir:
    """``--out``, as a run writes it: a seed saves its model to ``staged()``, a hidden folder inside, which
    ``finish`` moves to ``model/`` just before ``results.json`` is written; ``failed`` removes what no
    ``results.json`` describes."""

    def __init__(self, path: Path):
        self.path = path
        # The topmost folder of OUT's path that is missing: what this run makes, and removes again if it fails.
        self.made = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
        self.model: Path | None = None  # where the model is staged
        self.placed = False  # the staged model has been moved to model/ and results.json not yet written

    def staged(self) -> Path:
        """Where ``--save-model``'s model is saved: a name of this run alone, made by the saving itself."""
        self.model = self.path / f".model-{os.getpid()}-{time.time_ns()}.partial"
        return self.model

    def finish(self, results_text: str) -> None:
        """``results.json`` written beside its place first: where it cannot be (a full disk), OUT stays as it was
        and the results go to stdout, not lost with the seeds' training. Then an earlier run's results aside
        (``keep_earlier``), the staged model to ``model/``, and ``results.json`` renamed into place."""
        written = self.path / f".results-{os.getpid()}.json"
        try:
            write_text_atomic(written, results_text)
        except OSError as e:
            print(results_text, end="", flush=True)
            raise write_error(OSError(e.errno, e.strerror), self.path / "results.json") or e from None
        try:
            self._place(written)
        except BaseException:
            written.unlink(missing_ok=True)
            raise

    def _place(self, written: Path) -> None:
        keep_earlier(self.path)
        if self.model is not None and self.model.is_dir():
            target = self.path / "model"
            if target.exists():  # one no results.json describes (left by a run that failed before 2026-12-02)
                n = next(n for n in range(1, 10**6) if not (self.path / f"model.{n}").exists())
                target.rename(self.path / f"model.{n}")
                print(f"kept the earlier {target}, which no results.json describes, as model.{n}", file=sys.stderr)
            self.model.rename(target)
            self.model, self.placed = None, True
        os.replace(written, self.path / "results.json")
        self.placed = False

    def failed(self) -> None:
        """The staged (or just placed) model removed, then the folders this run made, where they are empty."""
        for path in (self.model, self.path / "model" if self.placed else None):
            if path is not None and path.exists():
                shutil.rmtree(path, ignore_errors=True)
        if self.made is None:
            return
        for folder in [self.path, *self.path.parents]:  # OUT up to the topmost folder the run made
            if not folder.is_dir() or any(folder.iterdir()):
                return
            folder.rmdir()
            if folder == self.made:
                return


def keep_earlier(out: Path) -> None:
    """An earlier run's ``results.json`` in ``out`` (and its saved ``model/``) move to ``results.N.json`` (and
    ``model.N/``), the first N free: a second run into the same folder replaces nothing."""
    path = out / "results.json"
    if not path.exists():
        return
    n = next(n for n in range(1, 10**6) if not any((out / name).exists() for name in (f"results.{n}.json",
                                                                                        f"model.{n}")))
    unread = ""
    if (out / "model").is_dir():
        try:
            earlier = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # cut short or not JSON: kept as it is, a run's results are not lost to it
            earlier = None
        (out / "model").rename(out / f"model.{n}")
        if isinstance(earlier, dict):
            earlier["saved_model"] = str(out / f"model.{n}")
            write_text_atomic(path, json.dumps(earlier, indent=2, ensure_ascii=False) + "\n")
        else:
            unread = f"; it is not a JSON object, so its saved_model does not name model.{n}"
    path.rename(out / f"results.{n}.json")
    model = f" (its model as model.{n})" if (out / f"model.{n}").is_dir() else ""
    print(f"kept the earlier {path} as results.{n}.json{model}{unread}", file=sys.stderr)
