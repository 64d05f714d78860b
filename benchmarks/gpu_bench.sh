#!/usr/bin/env bash
# Full-size throughput benchmark (benchmarks/bench_throughput.py) on a machine that has torch and transformers
# but not the rest, e.g. a lent GPU with no internet. Usage, from the repository root:
#
#   WHEELS=DIR bash benchmarks/gpu_bench.sh [bench_throughput.py options, e.g. --seq-lens 128]
#
# DIR holds the missing packages (PACKAGES below) as wheels, deepspeed as its sdist (built here against the
# local torch; no ops are compiled at install). Fetch them on a machine with internet, once per Python version
# the GPU machine might have (msgpack, pydantic-core and sentencepiece are per-version wheels; pip picks):
#
#   for PY in 3.10 3.11 3.12 3.13; do pip download -d DIR --no-deps --only-binary :all: --python-version $PY \
#     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
#     hjson==3.1.0 msgpack==1.2.4 ninja==1.13.2 py-cpuinfo==9.0.0 einops==0.8.2 psutil==7.2.2 pydantic==2.13.4 \
#     pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 accelerate==1.15.0 \
#     sentencepiece==0.2.3 braceexpand==0.1.7; done
#   pip download -d DIR --no-deps --no-binary :all: deepspeed==0.19.8
#
# (about 7.5 MB for one Python version). Results go to $OUT (default bench_out/): bench_throughput.json, the
# markdown table in bench_throughput.md, the progress log and the GPU's name. DeepSpeed's FusedAdam is built on first use and needs
# nvcc; without it both sides fall back to torch AdamW (the log and the table say which optimizer ran).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${WHEELS:?set WHEELS to the directory of carried wheels (see the header of this script)}"
OUT=${OUT:-bench_out}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"

PACKAGES=(hjson msgpack ninja py-cpuinfo einops psutil pydantic pydantic-core annotated-types typing-inspection
          accelerate sentencepiece braceexpand deepspeed)
"$PYTHON" -m pip install -q --no-deps --no-build-isolation --no-index --find-links "$WHEELS" "${PACKAGES[@]}"
"$PYTHON" - <<'EOF'
import importlib.util, sys
need = ["torch", "transformers", "deepspeed", "accelerate", "hjson", "pydantic", "cpuinfo", "msgpack", "einops",
        "psutil", "sentencepiece", "braceexpand", "yaml", "numpy"]
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"error: missing Python modules: {', '.join(missing)}; add their wheels to $WHEELS")
EOF
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

OPTIMIZER=fused
if ! timeout 420 "$PYTHON" -c "
import torch
from deepspeed.ops.adam import FusedAdam
p = torch.nn.Parameter(torch.zeros(8, device='cuda'))
p.grad = torch.ones_like(p)
FusedAdam([p]).step()" > "$OUT/fused_adam_build.log" 2>&1; then
    OPTIMIZER=torch
    echo "FusedAdam could not be built (see fused_adam_build.log); both sides use torch AdamW" | tee -a "$OUT/bench.log"
fi

"$PYTHON" benchmarks/bench_throughput.py --optimizer "$OPTIMIZER" --out "$OUT/bench_throughput.json" "$@" \
    2>> "$OUT/bench.log" | tee "$OUT/bench_throughput.md"
