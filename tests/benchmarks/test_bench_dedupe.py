"""benchmarks/bench_dedupe.py on a corpus of 20,000 sentences: its three ways run, the arrays' corpus is the set's
byte for byte (the script refuses otherwise), and the table holds each way's kept sentences."""
import subprocess
import sys

from conftest import REPO


def test_the_three_ways_run_and_keep_the_same_sentences(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/bench_dedupe.py", "--sentences", "20000", "--work",
                           str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "corpus.jsonl of arrays == set: yes" in proc.stdout
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| way")}
    assert set(rows) == {"arrays", "set", "no dedupe"}
    assert rows["arrays"] == rows["set"] and int(rows["no dedupe"].replace(",", "")) > int(rows["set"].replace(",", ""))
