"""benchmarks/bench_dedupe.py on a corpus of 20,000 sentences: its ways run (``--code`` here this checkout again),
the corpora with dedupe are the same byte for byte (the script refuses otherwise), and the table holds each way's
kept sentences and its main process's and workers' CPU seconds, also when it runs again into the same folder
(where the stage would skip an output that is up to date)."""
import subprocess
import sys

from conftest import REPO


def _table(work) -> dict:
    proc = subprocess.run([sys.executable, "benchmarks/bench_dedupe.py", "--sentences", "20000", "--work",
                           str(work), "--code", str(REPO)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "corpus.jsonl of both checkouts: the same" in proc.stdout
    return {cells[0]: cells[1:] for line in proc.stdout.splitlines() if line.startswith("| ")
            and not line.startswith("| way") for cells in [[c.strip() for c in line.strip("|").split("|")]]}


def test_the_ways_run_and_keep_the_same_sentences(tmp_path):
    for _ in range(2):  # the second time over the first one's outputs
        rows = _table(tmp_path)
        assert set(rows) == {"dedupe", "no dedupe", "before (--code)"}
        kept = {way: int(cells[0].replace(",", "")) for way, cells in rows.items()}
        assert kept["dedupe"] == kept["before (--code)"] < kept["no dedupe"]
        assert all(float(cells[3]) > 0 for cells in rows.values())  # the workers cleaned: the stage did not skip
