#!/usr/bin/env bash
# Everything issue 24 measures on a lent GPU, in one go, each step's output kept as it finishes:
#   1. install what the GPU image lacks from .gpu-kit/ (bash ../shared/gpu-kit/carry.sh), and xpt-ds itself;
#   2. build DeepSpeed's FusedAdam (nvcc, once per machine);
#   3. the main table: xpt_ds against HF Trainer + DeepSpeed (benchmarks/bench_throughput.py), sequence 128 and
#      512, phases 1 and 2, plus xpt_ds with torch.compile;
#   4. pytest -m gpu tests/gpu (4 workers on the one GPU), its report figures under OUT/gpu_report;
#   5. the other optimisations, one row each, at sequence 512, with a torch.profiler table per row;
#   6. the largest micro-batch at sequence 512 on both sides, phases 1 and 2.
# Usage, from the repository root:  bash benchmarks/gpu_session.sh OUT [--rehearse]
# --rehearse: the same steps on the CPU with the tiny model (DS_ACCELERATOR=cpu, no install); tests/gpu only
# collected unless XPT_GPU_TESTS_ON_CPU=1. tests/test_bench_throughput.py runs it so the script keeps working.
# OUT/steps.tsv has each step's exit code and seconds; OUT/DONE appears at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bash benchmarks/gpu_session.sh OUT [--rehearse]}
MODE=${2:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

step() {  # step NAME COMMAND...: output to OUT/NAME.log, exit code and seconds to OUT/steps.tsv
    local name=$1 t0=$SECONDS rc
    shift
    echo "[$(date +%T)] $name: $*" | tee -a "$OUT/session.log"
    "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$OUT/steps.tsv"
    return 0
}

if [ "$MODE" = --rehearse ]; then
    export DS_ACCELERATOR=cpu TORCHDYNAMO_DISABLE=1 OMP_NUM_THREADS=1
    SIZE=(--tiny --steps 2 --warmup 1 --worker-timeout 600)
    MAIN=(--seq-lens 32)
    LONG=(--seq-lens 32)
    MAXB=(--max-batch 2 4 --phases 2)
    MAIN_VARIANTS=${MAIN_VARIANTS-}  # compile is a no-op with TORCHDYNAMO_DISABLE; vocab64 covers variant rows
    OPTIMIZER=torch
    VARIANTS=(vocab64)
    PYTEST=(-n 0 -q)
    [ "${XPT_GPU_TESTS_ON_CPU:-0}" = 1 ] || PYTEST+=(--collect-only)
else
    export DS_ACCELERATOR=cuda
    # DeepSpeed 0.19.8's op builder cannot parse arch names like "9.0a" (the GPU image sets such a list): name
    # the GPU's own capability, which the JIT build of FusedAdam then targets.
    TORCH_CUDA_ARCH_LIST=$("$PY" -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())")
    export TORCH_CUDA_ARCH_LIST
    step install "$PY" -m pip install -q --no-deps --no-build-isolation --no-index --find-links .gpu-kit \
        hjson pydantic pydantic-core annotated-types typing-inspection webdataset braceexpand deepspeed
    step install_xpt "$PY" -m pip install -q --no-deps --no-build-isolation -e .
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
    SIZE=(--steps 50 --warmup 10 --worker-timeout 300)
    MAIN=(--seq-lens 128 512)
    LONG=(--seq-lens 512)
    MAXB=(--max-batch 32 64 96 128 192 256 384 512 768)
    OPTIMIZER=fused
    # FusedAdam's CUDA kernel is built by the first process that imports it; without nvcc both sides fall back.
    step fused_adam timeout 600 "$PY" -c "
import torch
from deepspeed.ops.adam import FusedAdam
p = torch.nn.Parameter(torch.zeros(8, device='cuda'))
p.grad = torch.ones_like(p)
FusedAdam([p]).step()
print('FusedAdam built and stepped')"
    grep -q "^fused_adam	0" "$OUT/steps.tsv" || OPTIMIZER=torch
    VARIANTS=(vocab64 no_overlap buckets_2e8 compile+vocab64)
    PYTEST=(-n 4 --dist load -q -rA)
fi
echo "optimizer: $OPTIMIZER" | tee -a "$OUT/session.log"
B=(benchmarks/bench_throughput.py --optimizer "$OPTIMIZER" "${SIZE[@]}")
# SESSION_STEPS picks and orders the steps (a second call with the GPU time that is left, say).
for name in ${SESSION_STEPS:-bench_main gpu_tests bench_variants bench_max_batch}; do
    case $name in
    bench_main) step bench_main "$PY" "${B[@]}" "${MAIN[@]}" --variants ${MAIN_VARIANTS-compile} \
        --out "$OUT/bench_main.json" ;;
    gpu_tests) step gpu_tests env XPT_GPU_REPORT="$OUT/gpu_report" "$PY" -m pytest -m gpu tests/gpu \
        -p no:cacheprovider "${PYTEST[@]}" ;;
    bench_variants) step bench_variants "$PY" "${B[@]}" "${LONG[@]}" --phases 2 --sides xpt \
        --variants "${VARIANTS[@]}" --profile "$OUT/profiles" --out "$OUT/bench_variants.json" ;;
    bench_max_batch) step bench_max_batch "$PY" "${B[@]}" "${LONG[@]}" "${MAXB[@]}" --out "$OUT/bench_max_batch.json" ;;
    *) echo "unknown step $name" >&2; exit 2 ;;
    esac
done
touch "$OUT/DONE"
