"""``launch/gpu_decoder.sh OUT --dry-run`` (docs/testing.md's step 0 of issue 57's GPU session) on a payload of
test fixtures: the three sweeps say their plans with the GPU's settings (every arm, size and seed, each sweep's
sizes in its own pieces), and OUT holds only what it held."""
import hashlib
import json
import os
import shutil
import subprocess

from conftest import REPO
from launch_builders import decoder_payload


def test_gpu_decoder_dry_run_says_what_each_sweep_would_do_and_writes_nothing(tmp_path, tiny_decoder, corpus):
    payload = decoder_payload(tmp_path / "xpt_payload" / "payload", tiny_decoder("llama", False), corpus)
    out = tmp_path / "gd"
    (out / "target").mkdir(parents=True)
    (out / "target/results.jsonl").write_text("")

    def files():
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.rglob("*") if p.is_file()}

    before = files()
    train = json.loads((corpus / "manifest.json").read_text())["splits"]["train"]["tokens"]
    proc = subprocess.run(["bash", str(REPO / "launch/gpu_decoder.sh"), str(out), "--dry-run", "--payload",
                           str(payload.parent)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "LARGEST": str(train // 1000 * 1000)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = proc.stdout.splitlines()
    for sweep, runs in (("sweep_target", 36), ("sweep_keep_vocab", 6), ("sweep_extend", 12)):  # arms x 3 sizes x 2
        assert f"{sweep}: dry run: {runs} of {runs} runs would start; nothing was changed in {out / sweep[6:]}" \
            in said, proc.stdout[-3000:]
    largest = train // 1000 * 1000
    assert f"sweep_target: would run xpt_subword_mean {largest // 1000}K seed 1: 4000 steps on {largest:,} tokens" \
        in said  # the largest size first, every seed: two phases of PHASE_STEPS 2000
    # keep_vocab's shards hold the same documents in twice the pieces here (decoder_payload): twice the sizes
    assert f"sweep_keep_vocab: would run keep_vocab {2 * largest // 1000}K seed 1: 4000 steps on " \
           f"{2 * largest:,} tokens" in said
    assert any(line.startswith("sweep_target: would score") and "source_text.json" in line for line in said)
    assert files() == before and sorted(p.name for p in out.iterdir()) == ["target"]
    shutil.rmtree(payload.parent)
