"""Where the suite's CPU time goes, one interpreter at a time: with this directory on ``PYTHONPATH`` and
``XPT_INTERPRETER_LOG`` naming a file, every Python interpreter that exits normally (pytest's workers, each
training rank, launchers, tools) appends one JSON line there: its pid, command line, the test that started it
(``PYTEST_CURRENT_TEST``, which subprocesses inherit), its own CPU seconds (user + system, children not
included) and wall seconds. A process killed by a signal, or one that leaves through ``os._exit``, writes none.
Summarise with ``python benchmarks/interpreters/summarize.py LOG`` (docs/testing.md, "How the suite stays fast").
Without ``XPT_INTERPRETER_LOG`` it does nothing."""
import os

if os.environ.get("XPT_INTERPRETER_LOG"):
    import atexit
    import time

    _START = time.time()

    def _log() -> None:
        import json
        import resource
        import sys
        usage = resource.getrusage(resource.RUSAGE_SELF)
        row = {"pid": os.getpid(), "argv": " ".join(sys.argv)[:300], "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
               "cpu": round(usage.ru_utime + usage.ru_stime, 2), "wall": round(time.time() - _START, 2)}
        try:
            with open(os.environ["XPT_INTERPRETER_LOG"], "a") as f:  # one short append per process
                f.write(json.dumps(row) + "\n")
        except OSError:
            pass  # a log that cannot be written must not change how the process ends

    atexit.register(_log)
