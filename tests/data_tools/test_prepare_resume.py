"""The clean stage resumes: after a ``kill -9``, a Ctrl-C or a file that fails mid-read, a rerun keeps the part of
``corpus.jsonl.tmp`` its last resume record names (``OUT/.prepare/clean.partial.json``) and writes the same
``corpus.jsonl`` as an uninterrupted run, byte for byte, dedupe included."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from data_tools.errors import PrepareError
from data_tools.pipeline.clean import resume as clean_resume
from data_tools.pipeline.clean.stage import clean
from data_tools.pipeline.options import PrepareOptions

WORDS = "서울은 대한민국의 수도이다 부산은 항구 도시이다 해운대가 유명하다".split()
SLOW_SPLITTER = ("def split(text):\n    import time\n    time.sleep(0.002)\n"
                 "    return [s for s in text.split('. ') if s]\n")


def _corpus(folder: Path, files: int = 3, docs: int = 120) -> list[Path]:
    """Documents of a few sentences, one in four of them repeated from earlier (across files too): the dedupe arrays
    a resume rebuilds decide what is kept after the resume point."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, n = [], 0
    for k in range(files):
        path = folder / f"{k}.txt"
        with open(path, "w", encoding="utf-8") as f:
            for _ in range(docs):
                sents = [f"{WORDS[(n + j) % len(WORDS)]} {n % 40 if j % 4 == 0 else n} {j} " + " ".join(WORDS)
                         for j in range(5)]
                f.write(". ".join(sents) + ".\n" + sents[1] + " 둘째.\n\n")
                n += 1
        paths.append(path)
    return paths


def _corpus_bytes(out: Path) -> bytes:
    return (out / "sentences" / "corpus.jsonl").read_bytes()


def test_a_kill_9_mid_clean_resumes_to_the_same_corpus(tmp_path):
    """A real ``kill -9`` of ``prepare clean --workers 2`` after its first resume records: the rerun says where it
    resumes, and its corpus.jsonl is byte-identical to an uninterrupted run's (with one worker, in this process)."""
    (tmp_path / "slowsplit.py").write_text(SLOW_SPLITTER)
    files, out = _corpus(tmp_path / "in", files=3, docs=100), tmp_path / "out"
    code = ("import sys; from data_tools.pipeline.clean import stage as k, resume as c; c.CHECKPOINT_BYTES = 2048; "
            "k._CHUNK_DOCS = 16; from data_tools.cli.prepare import main; sys.exit(main(sys.argv[1:]))")
    args = ["clean", "--input", str(tmp_path / "in"), "--out", str(out), "--splitter", "slowsplit:split"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", code, *args, "--workers", "2", "--quiet"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record = clean_resume.partial_path(out)
    try:
        deadline = time.monotonic() + 60
        while not (record.is_file() and json.loads(record.read_text())["files_done"] >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, "clean ended before it could be killed"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert not (out / "sentences" / "corpus.jsonl").exists()
    kept = json.loads(record.read_text())
    rerun = subprocess.run([sys.executable, "-m", "data_tools.cli.prepare", *args, "--workers", "2"], cwd=REPO, env=env,
                           capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert f"clean: resuming an interrupted run from its last checkpoint: {kept['stats']['read_documents']} " \
           "documents" in rerun.stderr
    assert not record.exists() and not (out / "sentences" / "corpus.jsonl.tmp").exists()
    clean(files, tmp_path / "fresh", PrepareOptions(splitter=_split), workers=1)  # slowsplit's split, less the sleep
    assert _corpus_bytes(out) == _corpus_bytes(tmp_path / "fresh")


class _Interrupt:
    """A splitter that is Ctrl-C'd at its ``at``-th paragraph (picklable, a module-level class)."""

    def __init__(self, at: int):
        self.at, self.calls = at, 0
        self.__qualname__ = "_split"  # the stage key of ``_split``
    def __call__(self, text: str) -> list[str]:
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return [s for s in text.split(". ") if s]


def _split(text: str) -> list[str]:
    return [s for s in text.split(". ") if s]


def test_ctrl_c_keeps_the_last_boundary_and_changed_options_start_over(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(clean_resume, "CHECKPOINT_BYTES", 1 << 40)  # only the interrupt writes a record
    files, out = _corpus(tmp_path / "in"), tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        clean(files, out, PrepareOptions(splitter=_Interrupt(600)), workers=1)
    rec = json.loads(clean_resume.partial_path(out).read_text())
    # 2 paragraphs a document: the 600th is in the second chunk of 256 documents; the first ends in file 3
    assert (rec["files_done"], rec["skip"], rec["stats"]["read_documents"]) == (2, 16, 256), rec
    clean(files, out, PrepareOptions(splitter=_split), workers=1)
    assert "resuming an interrupted run from its last checkpoint: 256 documents" in \
        capsys.readouterr().err
    clean(files, tmp_path / "fresh", PrepareOptions(splitter=_split), workers=1)
    assert _corpus_bytes(out) == _corpus_bytes(tmp_path / "fresh")

    with pytest.raises(KeyboardInterrupt):  # other options: the record is not used
        clean(files, out, PrepareOptions(splitter=_Interrupt(600)), workers=1, force=True)
    clean(files, out, PrepareOptions(splitter=_split, min_chars=30), workers=1)
    assert "not resuming the interrupted run: its options or input files changed; starting over" in \
        capsys.readouterr().err
    clean(files, tmp_path / "fresh30", PrepareOptions(splitter=_split, min_chars=30), workers=1)
    assert _corpus_bytes(out) == _corpus_bytes(tmp_path / "fresh30")


def test_a_file_failing_mid_read_keeps_the_files_before_it(tmp_path, capsys):
    """The run stops at a file that fails past its first bytes; the files before it stay cleaned, so a rerun with
    the file fixed (or removed) reads on from it, and writes what a fresh run does."""
    files, out = _corpus(tmp_path / "in", files=4, docs=300), tmp_path / "out"
    good = files[2].read_bytes()
    files[2].write_bytes(good + b"late \xff byte\n")
    opts = PrepareOptions(splitter=_split)
    with pytest.raises(PrepareError, match=rf"^{files[2]}:\d+: invalid UTF-8"):
        clean(files, out, opts, workers=2)
    assert json.loads(clean_resume.partial_path(out).read_text())["files_done"] == 2
    files[2].write_bytes(good)
    clean(files, out, opts, workers=2)
    assert f"reading on at the start of {files[2]} (file 3 of 4" in capsys.readouterr().err
    clean(files, tmp_path / "fresh", opts, workers=1)
    assert _corpus_bytes(out) == _corpus_bytes(tmp_path / "fresh")

    files[2].write_bytes(good + b"late \xff byte\n")  # removed instead: the rest is read on from file 3 of 3
    with pytest.raises(PrepareError):
        clean(files, out, opts, workers=1, force=True)
    files[2].unlink()
    clean(files[:2] + files[3:], out, opts, workers=1)
    assert f"reading on at the start of {files[3]} (file 3 of 3" in capsys.readouterr().err
    clean(files[:2] + files[3:], tmp_path / "fresh3", opts, workers=1)
    assert _corpus_bytes(out) == _corpus_bytes(tmp_path / "fresh3")


def test_a_failure_in_the_first_file_leaves_no_temp_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(clean_resume, "CHECKPOINT_BYTES", 1)  # a record after every chunk: one inside the file
    files, out = _corpus(tmp_path / "in", files=2, docs=300), tmp_path / "out"
    files[0].write_bytes(files[0].read_bytes() + b"late \xff byte\n")
    with pytest.raises(PrepareError, match=rf"^{files[0]}:\d+: invalid UTF-8"):
        clean(files, out, PrepareOptions(splitter=_split), workers=1)
    assert not clean_resume.partial_path(out).exists() and not list((out / "sentences").iterdir())


def test_a_record_whose_bytes_changed_is_not_used(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(clean_resume, "CHECKPOINT_BYTES", 1 << 40)
    files, out = _corpus(tmp_path / "in"), tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        clean(files, out, PrepareOptions(splitter=_Interrupt(600)), workers=1)
    tmp = out / "sentences" / "corpus.jsonl.tmp"
    tmp.write_bytes(tmp.read_bytes().replace("서울은".encode(), "부산은".encode(), 1))
    clean(files, out, PrepareOptions(splitter=_split), workers=1)
    assert "cannot be continued (its bytes differ from the record); starting over" in capsys.readouterr().err
    clean(files, tmp_path / "fresh", PrepareOptions(splitter=_split), workers=1)
    assert _corpus_bytes(out) == _corpus_bytes(tmp_path / "fresh")


def test_a_rerun_does_not_read_unchanged_split_files_again(tmp_path, monkeypatch, capsys):
    """The tokenize stage cut every split file into shards on every run, reading (and hashing) it whole; the cut is
    kept with the file's size, mtime, ctime and inode, and a rerun on unchanged files reads none of them."""
    from conftest import write_synthetic_corpus
    from data_tools.pipeline import shards
    from data_tools.pipeline.run import run_pipeline
    from data_tools.pipeline.shard_stage import tokenize
    src, out = write_synthetic_corpus(tmp_path / "corpus.txt", docs=60, seed=3), tmp_path / "out"
    opts = PrepareOptions(vocab_size=300, valid=0.1, test=0.1, shard_docs=7)
    manifest = Path(run_pipeline([src], out, opts)["manifest"]).read_bytes()
    cuts = []
    real_cut = shards._cut
    monkeypatch.setattr(shards, "_cut", lambda source, *a: cuts.append(source.name) or real_cut(source, *a))
    assert tokenize(out, opts)["written_shards"] == 0 and cuts == []
    assert "train.jsonl, valid.jsonl, test.jsonl unchanged since the last run's plan" in capsys.readouterr().err
    assert (out / "manifest.json").read_bytes() == manifest
    tokenize(out, opts, force=True)  # --force reads them all again
    assert cuts == ["train.jsonl", "valid.jsonl", "test.jsonl"] and (out / "manifest.json").read_bytes() == manifest
    cuts.clear()

    train = out / "sentences" / "train.jsonl"  # other bytes, same size and mtime: read again, its shards redone
    st, old = train.stat(), train.read_bytes()
    first = old.index(b"\n") + 1
    train.write_bytes(old[first:] + old[:first])
    os.utime(train, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert tokenize(out, opts)["written_shards"] > 0 and cuts == ["train.jsonl"]
    assert (out / "manifest.json").read_bytes() != manifest
