"""What a run writes (xpt_ds.metrics.run_log, xpt_ds.metrics.logger, xpt_ds.metrics.memory): stderr only, each log
record on a line of its own whether or not a progress bar is drawn, memory at each log step, and a last line
naming the export command."""
import io
import json
import logging
import re
import shlex

import pytest
from conftest import base_config, read_metrics, run_main, write_config

from xpt_ds.metrics.logger import MetricsLogger, progress_line
from xpt_ds.metrics.run_log import (
    BarSafeHandler,
    finished_line,
    library_output_to_stderr,
    quiet_load_report,
    setup_logging,
)

STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")  # FORMAT's asctime: where a log record starts


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def headless_bert(tmp_path_factory, tiny_bert):
    """The tiny BERT saved as a BertModel: no MLM head, as all-MiniLM-L6-v2 (the demo's source)."""
    from transformers import BertModel
    out = tmp_path_factory.mktemp("headless_bert")
    with quiet_load_report():
        BertModel.from_pretrained(tiny_bert).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory, headless_bert, corpus_bert):
    """One phase of 4 steps from the head-less source, the progress bar on (the default), a log step and a
    checkpoint every 2 steps, stderr and stdout captured to files (not a terminal), as a job's log."""
    root = tmp_path_factory.mktemp("logged_run")
    cfg = base_config(root / "run", headless_bert, corpus_bert, checkpoint={"every_steps": 2})
    cfg["phases"] = [{"name": "phase1", "steps": 4, "lr": 1e-3}]
    cfg["logging"].update(log_every=2, progress_bar=True)
    proc = run_main("xpt_ds.cli.train", ["--config", str(write_config(root / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run", proc


def test_a_log_file_gets_whole_lines_and_no_bar(logged_run):
    _, proc = logged_run
    err = proc.stderr
    assert "\r" not in err and "it/s]" not in err, err[-2000:]  # no bar: its updates are carriage returns
    starts = [m.start() for m in STAMP.finditer(err)]
    assert len(starts) > 5 and all(i == 0 or err[i - 1] == "\n" for i in starts), err[-2000:]
    lines = re.findall(r"step (\d+)/(\d+): loss \d+\.\d+, lr [^,]+, [\d.]+ tokens/s, ETA \d+s; host RSS", err)
    assert lines == [("2", "4"), ("4", "4")], err[-2000:]


def test_stdout_holds_no_library_line_and_the_head_line_comes_before_training(logged_run):
    _, proc = logged_run
    assert proc.stdout == ""  # DeepSpeed's `shm_comm_op built successfully` print went to stderr
    assert "shm_comm_op built successfully" in proc.stderr
    head = proc.stderr.index("lacks 5 MLM weights")
    assert head < proc.stderr.index("step 2/4: loss")
    assert "LOAD REPORT" not in proc.stderr and "seem corrupted" not in proc.stderr


def test_memory_is_logged_at_each_log_step(logged_run):
    run, _ = logged_run
    rows = {s: r for s, r in read_metrics(run).items() if "train/loss" in r}
    assert sorted(rows) == [2, 4]
    for r in rows.values():
        assert 0.05 < r["mem/host_rss_gib"] <= r["mem/host_peak_rss_gib"] < 256, r
        assert not any(k.startswith("mem/gpu") for k in r)  # absent on CPU, not zero
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    tb = EventAccumulator(str(run / "tb")).Reload()
    assert [e.step for e in tb.Scalars("mem/host_peak_rss_gib")] == [2, 4]


def test_a_finished_run_names_an_export_command_that_works(logged_run):
    run, proc = logged_run
    last = proc.stderr.strip().splitlines()[-1]
    valid = [r["valid/loss"] for r in read_metrics(run).values() if "valid/loss" in r][-1]
    assert last == (f"finished: 4 steps, final valid loss {valid:.4f}; next: xpt-ds export --run {run} --out "
                    f"{run / 'export'}")
    argv = shlex.split(last.split("next: ", 1)[1])
    assert argv[:2] == ["xpt-ds", "export"]
    done = run_main("xpt_ds.cli.export", argv[2:])
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run / "export" / "config.json").is_file()


def test_finished_line_says_what_the_time_budget_ended_and_exports_the_best(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 3, "train/loss": 2.5}) + "\n")
    assert finished_line(str(tmp_path), 3, 8, ["phase1", "phase2"], keep_best=False) == (
        "finished: 3 of 8 planned steps (the time budget, guard.max_train_minutes, ended phase 'phase1', 'phase2' "
        f"early; a resume does not train it further), final train loss 2.5000; next: xpt-ds export --run {tmp_path} "
        f"--out {tmp_path / 'export'}")
    (tmp_path / "best.json").write_text("{}")
    assert f"--run {tmp_path} --tag best --out" in finished_line(str(tmp_path), 8, 8, [], keep_best=True)


def test_on_a_terminal_a_log_line_never_shares_the_bar_row(tmp_path):
    import torch
    term = Terminal()
    logger = logging.getLogger("test_run_log.bar")  # records through a BarSafeHandler on the bar's stream
    logger.handlers, logger.propagate = [BarSafeHandler(term)], False
    logger.setLevel(logging.INFO)
    metrics = MetricsLogger(tmp_path, True, False, True, stream=term)
    metrics.start(0, 4)
    assert metrics.bar is not None
    for step in (1, 2):
        metrics.advance()
        metrics.bar.refresh()  # drawn now, whatever tqdm's mininterval
        logger.info("saved checkpoint %d", step)
    metrics.log_step(2, 4, {"train/loss": 1.0, "train/lr": 1e-3, "train/tokens_per_s": 9.0}, 0.1,
                     torch.device("cpu"))
    metrics.close()
    out = term.getvalue()
    for step in (1, 2):
        at = out.index(f"saved checkpoint {step}\n")
        row = out[out.rindex("\n", 0, at) + 1 if "\n" in out[:at] else 0:at]  # what the terminal row held before
        assert row.split("\r")[-1] == "" and set(row.split("\r")[-2]) == {" "}, repr(row)  # the bar, cleared
    assert "step 2/4" not in out and "host_rss_gib=" in out  # the bar carries the progress and the memory


def test_without_a_terminal_or_with_the_bar_off_the_log_step_logs_a_line(tmp_path, caplog):
    import torch
    for stream, progress in ((io.StringIO(), True), (Terminal(), False)):
        metrics = MetricsLogger(tmp_path, True, False, progress, stream=stream)
        metrics.start(0, 10)
        assert metrics.bar is None
        with caplog.at_level(logging.INFO, logger="xpt_ds.metrics.logger"):
            metrics.log_step(4, 10, {"train/loss": 1.0, "train/lr": 1e-3, "train/tokens_per_s": 9.0}, 2.0,
                             torch.device("cpu"))
        metrics.close()
        assert stream.getvalue() == ""
        assert caplog.records[-1].getMessage().startswith("step 4/10: loss 1.0000, lr 0.001, 9 tokens/s, ETA 12s; "
                                                          "host RSS ")


def test_progress_line_gives_the_gpu_peaks_and_hours():
    line = progress_line(5, 100, {"train/loss": None, "train/lr": 2e-4, "train/tokens_per_s": 12345.6,
                                  "train/mfu": 0.412, "mem/host_rss_gib": 1.5, "mem/host_peak_rss_gib": 2.0,
                                  "mem/gpu_peak_allocated_gib": 30.25, "mem/gpu_peak_reserved_gib": 32.0}, 7385)
    assert line == ("step 5/100: loss n/a (every step skipped), lr 0.0002, 1.235e+04 tokens/s, MFU 41.2%, ETA 2h03m; "
                    "host RSS 1.50 GiB, host peak 2.00 GiB, GPU peak 30.25 GiB allocated, 32.00 reserved")


def test_a_library_logger_made_during_the_run_writes_to_stderr(capsys):
    """DeepSpeed's logger is made at its first import with a handler on sys.stdout (deepspeed.utils.logging): made
    inside library_output_to_stderr, as xpt_ds.cli.train imports DeepSpeed, it writes to stderr."""
    from deepspeed.utils.logging import LoggerFactory
    with library_output_to_stderr():
        made = LoggerFactory.create_logger("test_run_log.library")
        print("a library's print")
    try:
        made.warning("Setting accelerator to CPU")
        out, err = capsys.readouterr()
        assert out == "" and "Setting accelerator to CPU" in err and "a library's print" in err
    finally:
        made.handlers.clear()


@pytest.fixture
def transformers_at_warning():
    """transformers' logger at its own default, WARNING: a finetune run in this process (xpt_ds.cli.finetune sets
    verbosity to error) must not decide what these tests see."""
    lib = logging.getLogger("transformers")
    level = lib.level
    lib.setLevel(logging.WARNING)
    yield
    lib.setLevel(level)


def test_setup_logging_sends_library_records_through_the_one_handler(transformers_at_warning):
    root, names = logging.getLogger(), ("DeepSpeed", "transformers")
    saved = (root.handlers[:], root.level, [(logging.getLogger(n).handlers[:], logging.getLogger(n).propagate)
                                            for n in names])
    stream = io.StringIO()
    try:
        setup_logging(True, stream)
        logging.getLogger("DeepSpeed").warning("from deepspeed")
        logging.getLogger("transformers.modeling_utils").warning("from transformers")
    finally:
        logging.captureWarnings(False)
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
        for n, (handlers, propagate) in zip(names, saved[2]):
            logging.getLogger(n).handlers[:], logging.getLogger(n).propagate = handlers, propagate
    lines = stream.getvalue().splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == ["DeepSpeed: from deepspeed",
                                                         "transformers.modeling_utils: from transformers"]


def test_quiet_load_report_hides_transformers_table_of_what_the_project_reports(headless_bert,
                                                                             transformers_at_warning):
    from transformers import BertForMaskedLM
    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    lib = logging.getLogger("transformers.modeling_utils")
    lib.addHandler(handler)
    try:
        with quiet_load_report():
            BertForMaskedLM.from_pretrained(headless_bert)
        assert seen == []
        BertForMaskedLM.from_pretrained(headless_bert)  # the same load, as transformers reports it
        assert any("LOAD REPORT" in r.getMessage() for r in seen)
    finally:
        lib.removeHandler(handler)


def test_a_resume_sets_aside_later_rows_and_lines_that_are_not_rows(tmp_path):
    """A resume from step 2 moves the rows after it to metrics.superseded.jsonl, and with them any line that is
    not a row: a line a crash cut, bytes that are not UTF-8. Such bytes stopped every resume with a
    UnicodeDecodeError naming no file, and a cut line was dropped (until 2026-12-04)."""
    rows = [json.dumps({"step": s, "train/loss": 1.0 / s}).encode() + b"\n" for s in (1, 2, 3)]
    garbage = [b"\xa8\xff\xfe not a row\n", b'{"step": 4, "train/lo\n']
    (tmp_path / "metrics.jsonl").write_bytes(rows[0] + garbage[0] + rows[1] + rows[2] + garbage[1])
    logger = MetricsLogger(tmp_path, enabled=True, tensorboard=False, progress=False)
    logger.start(2, 8)
    logger.log(3, {"train/loss": 0.25})
    logger.close()
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert (tmp_path / "metrics.superseded.jsonl").read_bytes() == garbage[0] + rows[2] + garbage[1]


def test_a_row_that_cannot_be_written_names_metrics_jsonl(tmp_path):
    """On a full disk the run ended with "error: No space left on device", naming no file (here a file-size limit:
    Python ignores SIGXFSZ, so write() raises EFBIG as it raises ENOSPC)."""
    import errno
    import resource
    logger = MetricsLogger(tmp_path, enabled=True, tensorboard=False, progress=False)
    logger.start(0, 8)
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, old[1]))
    try:
        with pytest.raises(OSError) as info:
            logger.log(1, {"train/loss": 1.0, "note": "x" * 200})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        logger.close()
    assert (info.value.errno, info.value.filename) == (errno.EFBIG, str(tmp_path / "metrics.jsonl"))


TB_FULL = """
import resource, sys, time
from pathlib import Path
from xpt_ds.metrics.logger import MetricsLogger
logger = MetricsLogger(Path(sys.argv[1]), enabled=True, tensorboard=True, progress=False)
logger.start(0, 1000)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    for step in range(1, 2000):  # until the writer thread's failure reaches this thread
        logger.log(step, {"train/loss": 1.0 / step, "train/lr": 0.1})
        time.sleep(0.002)
except OSError as e:
    print("log:", e.filename)
try:
    logger.close()
except OSError as e:
    print("close:", e.filename)
"""


def test_a_tensorboard_write_that_fails_is_an_error_naming_tb_and_no_thread_traceback(tmp_path):
    """TensorBoard writes in a thread of its own, which printed its traceback ("Exception in thread ...") before the
    run's error line, and closing the writer raised the error again naming no file. In a process of its own:
    pytest catches threads' exceptions itself."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", TB_FULL, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"log: {tmp_path / 'tb'}", f"close: {tmp_path / 'tb'}"]
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr, done.stderr
