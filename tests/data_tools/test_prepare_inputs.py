"""prepare on messy inputs: a sentence-per-line file (``--doc-boundary line``, and the early stop under ``blank``),
binary files given as text, and a ``kill -9`` in the clean stage (no worker left behind, a rerun finishes)."""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, one_error_line_of
from data_tools.errors import PrepareError
from data_tools.pipeline import readers
from data_tools.pipeline.readers import read_documents
from data_tools_builders import cli

LINES = ["서울은 대한민국의 수도이다.", "부산은 항구 도시이다.", "해운대가 유명하다!"]


def test_doc_boundary_line_makes_each_line_a_document(tmp_path):
    src = tmp_path / "a.txt"
    src.write_text("\n".join(LINES[:2]) + "\n\n  \n" + LINES[2] + "\n", encoding="utf-8")
    assert list(read_documents(src, doc_boundary="line")) == [[s] for s in LINES]
    assert list(read_documents(src, doc_boundary="blank")) == [LINES[:2], LINES[2:]]


def test_a_blank_boundary_document_past_the_limit_stops_early_naming_line(tmp_path, monkeypatch):
    """A sentence-per-line file has no blank line: under --doc-boundary blank it was one document, read whole (856 MB
    RSS for 100 MB) until the split stage said "too few documents: 1". It stops at the line that passes the limit."""
    src = tmp_path / "sentences.txt"
    lines = [f"{s} {i}" for i in range(100) for s in LINES]
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    monkeypatch.setattr(readers, "MAX_BLANK_DOC_CHARS", 200)
    at = next(n for n in range(1, len(lines)) if sum(map(len, lines[:n])) > 200)
    with pytest.raises(PrepareError, match=rf"^{src}:{at}: no blank line for {at} lines .*--doc-boundary line"):
        list(read_documents(src))
    assert len(list(read_documents(src, doc_boundary="line"))) == 300
    assert len(list(read_documents(src, doc_boundary="file"))) == 1  # whole files asked for: no limit


def test_a_sentence_per_line_file_is_one_error_line_before_the_split_stage(tmp_path):
    """Through the CLI at the real limit: one error line (not "too few documents: 1" after a whole clean)."""
    line = "x" * 1000 + "\n"
    src = tmp_path / "big.txt"
    src.write_text(line * (readers.MAX_BLANK_DOC_CHARS // 1000 + 1), encoding="ascii")
    proc = cli("clean", "--input", src, "--out", tmp_path / "out", "--workers", 1)
    one_error_line_of(proc, f"{src}:{readers.MAX_BLANK_DOC_CHARS // 1000 + 1}: no blank line", "--doc-boundary line")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name,head,says", [
    ("doc.pdf", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "(a PDF)"),
    ("a.zip", b"PK\x03\x04\x14\x00\x00\x00\x08\x00\xff\xfe", "(a zip archive"),
    ("prog", b"\x7fELF\x02\x01\x01\x00\x00\xff", "(an ELF executable)"),
    ("nul.bin", b"text\nmore \x00\x00\xff\x00 bytes\n", "(it holds NUL bytes)"),
])
def test_a_binary_file_is_called_binary_not_another_encoding(tmp_path, name, head, says):
    path = tmp_path / name
    path.write_bytes(head + b"\x00\x01\x02\xfe\xff" * 50)
    proc = cli("--input", path, "--out", tmp_path / "out", "--vocab-size", 50, "--workers", 1)
    err = one_error_line_of(proc, f"{path}:", "looks like a binary file", says, "not text")
    assert "--encoding" not in err
    gz = tmp_path / f"{name}.gz"  # the magic of what the compressed stream holds
    gz.write_bytes(gzip.compress(path.read_bytes()))
    one_error_line_of(cli("--input", gz, "--out", tmp_path / "out2", "--workers", 1), "looks like a binary file", says)


def test_text_in_another_encoding_still_gets_the_encoding_hint(tmp_path):
    path = tmp_path / "cp949.txt"
    path.write_bytes("\n".join(LINES).encode("cp949"))
    proc = cli("--input", path, "--out", tmp_path / "out", "--workers", 1)
    err = one_error_line_of(proc, f"{path}:1: invalid UTF-8", "(text in another encoding: --encoding NAME)")
    assert "binary" not in err


def _good(path: Path, lines: int = 3) -> Path:
    path.write_text("".join(f"{LINES[i % 3]} {i}\n" + ("\n" if i % 3 == 2 else "") for i in range(lines)),
                    encoding="utf-8")
    return path


def test_every_bad_file_of_a_folder_is_named_in_one_run(tmp_path):
    """A folder's binary and wrongly encoded files were found one run at a time: each run stopped at the first,
    after cleaning every file before it. Their first bytes are read first now, and one line names all of them."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("a.txt", "c.txt", "e.txt"):
        _good(inputs / name)
    (inputs / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (inputs / "d.txt").write_bytes("\n".join(LINES).encode("cp949"))
    (inputs / "f.txt").write_bytes(b"text\nutf-16? \x00t\x00e\x00x\x00t\x00\n")
    stray = _good(inputs / "g.txt", 300)  # one stray NUL in scraped text: not called binary
    stray.write_bytes(stray.read_bytes().replace(b"\n", b"\x00\n", 1))
    proc = cli("--input", inputs, "--out", tmp_path / "out", "--vocab-size", 50, "--workers", 1)
    line = one_error_line_of(proc, "error: 3 of 7 input files cannot be read as text: ",
                             f"{inputs / 'b.png'}: this looks like a binary file (a PNG image)",
                             f"{inputs / 'd.txt'}:1: invalid UTF-8 (byte 0x", "--encoding NAME",
                             f"{inputs / 'f.txt'}:2: this looks like a binary file (it holds NUL bytes)")
    assert "a.txt" not in line and "g.txt" not in line and not (tmp_path / "out" / "sentences").exists()


def test_files_that_fail_past_their_start_are_named_together(tmp_path, monkeypatch):
    """Past the bytes read first (``readers.HEAD_BYTES``), a file fails only as the clean stage reads it: then the
    files after it are read for their own problems (for at most ``SWEEP_SECONDS``) before the one error."""
    from data_tools.pipeline.clean import stage as clean_stage
    from data_tools.pipeline.options import PrepareOptions
    files = [_good(tmp_path / f"{i}.txt", 3000) for i in range(5)]
    for bad in (files[1], files[3]):
        bad.write_bytes(bad.read_bytes() + b"\xff late\n")
    assert files[1].stat().st_size > readers.HEAD_BYTES
    proc = cli("clean", "--input", *files, "--out", tmp_path / "out", "--workers", 1)
    one_error_line_of(proc, "error: 2 of 5 input files cannot be read as text: ",
                      f"{files[1]}:4001: invalid UTF-8 (byte 0xff at column 1)", f"{files[3]}:4001: invalid UTF-8")
    assert not (tmp_path / "out" / "sentences" / "corpus.jsonl").exists()
    monkeypatch.setattr(clean_stage, "SWEEP_SECONDS", 0.0)
    with pytest.raises(PrepareError) as info:
        clean_stage.clean(files, tmp_path / "out2", PrepareOptions())
    assert str(info.value).startswith(f"{files[1]}:4001: invalid UTF-8") and str(info.value).endswith(
        " (3 later file(s) not checked: the check stops after 0 s)")


def _children(pid: int) -> list[int]:
    """Every process below ``pid`` (psutil if installed, else a /proc scan by parent pid)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    parents = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [pid]
    while todo:
        kids = [c for c, p in parents.items() if p == todo.pop()]
        found += kids
        todo += kids
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie no init reaps in a container counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _big_corpus(path: Path, mb: int) -> Path:
    """Distinct documents of a few sentences, ``mb`` MB: several seconds of cleaning with two workers."""
    words = [w for s in LINES for w in s.rstrip(".!").split()]
    with open(path, "w", encoding="utf-8") as f:
        i, size = 0, 0
        while size < mb << 20:
            doc = "\n".join(f"{words[(i + k) % len(words)]} {i}-{k} " + " ".join(words) + "." for k in range(6))
            size += f.write(doc + "\n\n")
            i += 1
    return path


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_kill_9_in_clean_leaves_no_worker_and_a_rerun_finishes(tmp_path):
    """Pool workers outlived a ``kill -9`` of prepare (blocked on their task queue for ever, or printing BrokenPipe
    tracebacks); now they get SIGTERM with it. The killed run's ``corpus.jsonl.tmp`` is rewritten by the rerun."""
    src, out = _big_corpus(tmp_path / "big.txt", 48), tmp_path / "out"
    cmd = [sys.executable, "-m", "data_tools.cli.prepare", "clean", "--input", str(src), "--out", str(out),
           "--workers", "2", "--quiet"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tmp = out / "sentences" / "corpus.jsonl.tmp"
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not (tmp.is_file() and tmp.stat().st_size > 1 << 20):  # mid-clean: results written, workers busy
            assert proc.poll() is None and time.monotonic() < deadline, "clean ended before it could be killed"
            time.sleep(0.05)
        workers = _children(proc.pid)
        assert len(workers) >= 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [w for w in workers if _alive(w)]
    finally:
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
        proc.kill()
        proc.wait()
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    assert not left, f"workers {left} outlived the kill -9 of prepare {proc.pid}"
    # multiprocessing's resource tracker outlives the kill by design: it unlinks the pool's semaphores and says so
    said = [line for line in err.splitlines() if "resource_tracker" not in line]
    assert said == [], err
    assert tmp.is_file() and not (out / "sentences" / "corpus.jsonl").exists()
    _big_corpus(src, 1)  # a smaller input, to keep the rerun short: the stage runs again and writes its file anew
    rerun = cli(*cmd[3:])
    assert rerun.returncode == 0, rerun.stderr
    assert not tmp.exists() and (out / "sentences" / "corpus.jsonl").is_file()
    first = json.loads((out / "sentences" / "corpus.jsonl").open(encoding="utf-8").readline())
    assert first[0].startswith(LINES[0].split()[0])
