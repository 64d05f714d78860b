"""benchmarks/interpreters: the per-interpreter CPU log docs/testing.md measures the suite with, and its summary."""
import json
import os
import subprocess
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "interpreters"))
from summarize import main as summarize_main  # noqa: E402
from summarize import summarize  # noqa: E402


def _python(args, env):
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_each_interpreter_logs_its_test_and_cpu_and_the_summary_adds_them_up(tmp_path, capsys):
    log = tmp_path / "interp.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO / "benchmarks" / "interpreters"), "XPT_INTERPRETER_LOG": str(log)}
    assert _python(["-c", "sum(range(10**6))"], env).returncode == 0
    assert "usage:" in _python(["-m", "xpt_ds.cli.train", "--help"], env).stdout  # no heavy imports: a fast row
    assert _python(["-c", "import os; os._exit(0)"], env).returncode == 0  # leaves without atexit: no row
    off = {k: v for k, v in env.items() if k != "XPT_INTERPRETER_LOG"}
    assert _python(["-c", "pass"], off).returncode == 0  # the log is opt-in
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 2
    test = os.environ["PYTEST_CURRENT_TEST"].split(" ")[0]
    assert all(r["test"].split(" ")[0] == test and r["cpu"] > 0 and r["wall"] >= 0 for r in rows)
    assert rows[0]["argv"].startswith("-c") and "xpt_ds/cli/train.py --help" in rows[1]["argv"]
    tables = summarize(rows)
    assert [(k, n) for k, n, _ in tables["test"]] == [(test, 2)]
    assert {k for k, _, _ in tables["kind"]} == {"training rank", "pytest or python -c"}
    assert summarize_main([str(log)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 interpreters, ") and "| training rank | 1 |" in out


def test_each_test_logs_its_own_and_its_childrens_cpu(tmp_path):
    """cpu_per_test counts what a test's children spent, which the interpreter log misses for a child that is
    killed or leaves through os._exit (a forked run, a kill -9 round)."""
    (tmp_path / "test_burn.py").write_text(
        "import subprocess, sys\n\n"
        "def test_child():\n"
        "    subprocess.run([sys.executable, '-c', 'import os\\nsum(range(3 * 10**7))\\nos._exit(0)'], check=True)\n\n"
        "def test_nothing():\n"
        "    pass\n")
    log = tmp_path / "cpu.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO / "benchmarks" / "interpreters"), "XPT_TEST_CPU_LOG": str(log)}
    args = ["-q", "-n", "0", "-p", "no:cacheprovider", "-p", "cpu_per_test", "-c", os.devnull, "--rootdir",
            str(tmp_path), str(tmp_path / "test_burn.py")]
    done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = {r["id"].split("::")[1]: r for r in map(json.loads, log.read_text().splitlines())}
    assert set(rows) == {"test_child", "test_nothing"}
    assert rows["test_child"]["kids"] > 0.2 > rows["test_nothing"]["kids"]
    summary = _python([str(REPO / "benchmarks/interpreters/cpu_per_test.py"), str(log)], os.environ)
    assert summary.returncode == 0 and summary.stdout.startswith("2 tests, ")
    assert "| test_burn.py | " in summary.stdout and "| 2 |" in summary.stdout
