#!/usr/bin/env bash
# The corpus of benchmarks/bench_big_gpu.py's rows in a GPU session (issue 54's 8B and 3B rows), prepared here on
# the CPU: UA-GEC's corrected train text with a 32,000-piece vocabulary (bench_build.py's prepare_data, which needs
# the ua-gec package that launch/install.sh installs), copied to .gpu-payload-big/uk (git-ignored), which the
# device call carries and benchmarks/gpu_session.sh's decoder_big step reads (BIG_DATA).
# Usage, from anywhere:  bash benchmarks/big_payload.sh    (PREP=DIR keeps the prepared corpus elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
PREP=${PREP:-sweeps/big_prep}
PYTHONPATH=benchmarks python3 -c "import sys; from pathlib import Path; from bench_build import prepare_data
print('prepared', prepare_data(Path(sys.argv[1])))" "$PREP"
rm -rf .gpu-payload-big
mkdir -p .gpu-payload-big
mkdir .gpu-payload-big/uk
cp "$PREP"/uk/manifest.json "$PREP"/uk/spm.model "$PREP"/uk/*.tar .gpu-payload-big/uk/  # what the trainer reads
echo "payload: .gpu-payload-big/uk, $(du -sh .gpu-payload-big | cut -f1)"
