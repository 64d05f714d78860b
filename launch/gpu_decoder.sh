#!/usr/bin/env bash
# Issue 57 on one lent GPU: does XPT help a decoder, and what does each method cost the source language?
# SmolLM2-135M-Instruct (English) -> Ukrainian UA-GEC, bf16 (launch/configs/decoder_gpu.yaml), every run stopped
# early on its validation loss, scored from its best checkpoint on its test shards and, through its export, on
# the same English and Ukrainian text in its own tokenizer (bits per byte: comparable across tokenizers).
#   bash launch/gpu_decoder.sh OUT [--payload DIR] [--rehearse | --pack | --dry-run]
# --payload DIR: where the device calls left launch/gpu_decoder_payload.sh's slices (default /tmp/xpt_payload);
#   they are joined, checked against payload.sha256 and unpacked into DIR/payload once.
# --rehearse: the same steps on this CPU with tiny settings (steps, sizes, batch, text; the same bf16 ZeRO-1
#   engine, the real 135M source), to keep the script working: launch/gpu_decoder_payload.sh first, then
#   --payload .gpu-payload-decoder.
# --dry-run: what the GPU's sweeps would do with OUT (xpt-ds sweep --dry-run), nothing written to OUT; give the
#   payload the GPU's path first: ln -sfn "$PWD/.gpu-payload-decoder/payload" /tmp/xpt_payload/payload.
# --pack: the verdicts and OUT/results.tgz from what has finished, at any time.
# The script ends within BUDGET_S seconds of its start (GPU default 540), packed: no run starts later than RUN_S
# (default 180) + PACK_S (default 45) seconds before the end, runs still going then are stopped (SIGTERM), and
# the last PACK_S seconds pack what finished. A later session unpacks results.tgz into its OUT and goes on: the
# scored runs are skipped (xpt-ds sweep: a row per run in results.jsonl), unless their config or arguments
# changed (--rerun-changed). No weights come back: every run's checkpoints and export are deleted once it is
# scored (--drop-weights: an XPT run's phase-2 checkpoint is 1.6 GB, its best and newest 3.1 GB together, in
# the CPU rehearsal's bf16 engine; 8 runs at once on a machine with 64 GB of disk).
# Steps, each one's log in OUT/NAME.log and exit code and seconds in OUT/steps.tsv:
#   1. unpack the payload; on the GPU install .gpu-kit/, gguf and xpt-ds;
#   2. source: the GGUF dequantized into a model directory once, with the payload's source_tokenizer/
#      (experiments.decoder.source); sizes: the
#      training sizes (FRACTIONS of LARGEST target pieces) in each sweep's own pieces (OUT/sizes.json,
#      experiments.decoder.sizes), so every sweep's size k is the same share of the corpus;
#   3. three sweeps side by side on the one GPU (PARALLEL + 3 runs at once), the largest size first (every seed),
#      then seed by seed, smallest size first; each phase PHASE_STEPS at most (default 2000) and its share of
#      TRAIN_S (default 100 s of training a run); SEEDS (default 1 2):
#      target:     scratch, lora, xpt_no_itl, xpt, xpt_sp, and xpt_subword_mean (XPT with the subword_mean start)
#                  in the new 8,000-piece vocabulary;
#      keep_vocab: continued pretraining of every weight in SmolLM2's own tokenizer;
#      extend:     SmolLM2's tokenizer with 8,000 Ukrainian pieces appended (new rows, then everything), the
#                  new rows from the random start and from subword_mean (extend_subword_mean), as XPT's;
#      every run's export scored on text/en.txt (English retention) and text/uk.txt (--score-text), its layers
#      probed on text/en.txt with SmolLM2's own embeddings and head (--probe-text en: xpt_ds.cli.probe), and the
#      untouched source once per sweep (source_text.json);
#   4. OUT/claims.md (python -m experiments.decoder.claims) and OUT/results.tgz (no weights).
set -uo pipefail
cd "$(dirname "$0")/.."
source launch/session_steps.sh  # session_args, step, budget_run, budget_left, unpack_payload, pack_study,
#                                 sweep_deadline, sweeps_then_pack
session_args "$0" "$@"

# 4 (and --pack): the verdicts (OUT/claims.md), then everything but the weights in OUT/results.tgz.
pack() {
  pack_study experiments.decoder.pack
}
if [ "$MODE" = pack ]; then
  pack && echo "[$(date +%T)] packed: $OUT/results.tgz" | tee -a "$OUT/session.log"
  exit
fi

WORK=$OUT  # the base config, sizes.json (a dry run: a temporary folder, OUT untouched)
[ "$MODE" = dry ] && dry_steps
step unpack unpack_payload source.gguf || exit 1
P=$(cd "$PAYLOAD/payload" && pwd)

if [ "$MODE" = rehearse ]; then
  export DS_ACCELERATOR=cpu OMP_NUM_THREADS=1
  LARGEST=${LARGEST:-4000} FRACTIONS=${FRACTIONS:-0.5 1} PHASE_STEPS=${PHASE_STEPS:-2} PARALLEL=${PARALLEL:-2}
  SEEDS=${SEEDS:-1} TRAIN_S=${TRAIN_S:-0} TEXT_LINES=${TEXT_LINES:-8}
  ENGINE=(optim.micro_batch_size=2 data.seq_len=64 logging.eval_every=1 logging.eval_batches=2
          logging.log_every=1 data.num_workers=0 guard.early_stop_patience=2)
  EVAL=(--eval-batch-size 4 --eval-max-batches 2)
elif [ "$MODE" = dry ]; then
  export DS_ACCELERATOR=cpu
else
  export DS_ACCELERATOR=cuda
  step install "$PY" -m pip install -q --no-deps --no-build-isolation --no-index --find-links .gpu-kit \
    --find-links "$P/wheels" hjson pydantic pydantic-core annotated-types typing-inspection webdataset braceexpand \
    deepspeed gguf || exit 1
  step install_xpt "$PY" -m pip install -q --no-deps --no-build-isolation -e . || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt" 2>&1
fi
if [ "$MODE" != rehearse ]; then
  LARGEST=${LARGEST:-600000} FRACTIONS=${FRACTIONS:-0.25 0.5 1} PHASE_STEPS=${PHASE_STEPS:-2000}
  PARALLEL=${PARALLEL:-5} SEEDS=${SEEDS:-1 2} TRAIN_S=${TRAIN_S:-100} BUDGET_S=${BUDGET_S-540} TEXT_LINES=0
  ENGINE=()
  EVAL=(--eval-batch-size 64)
fi
# the texts every run's export is scored on (the rehearsal: their first TEXT_LINES lines)
EN=$P/text/en.txt UK=$P/text/uk.txt
if [ "$TEXT_LINES" -gt 0 ]; then
  head -n "$TEXT_LINES" "$EN" >"$WORK/en.txt" && head -n "$TEXT_LINES" "$UK" >"$WORK/uk.txt"
  EN=$WORK/en.txt UK=$WORK/uk.txt
fi

# 2. The source directory and the sizes.
# the tokenizer the payload's shards were made with (a payload before it had none: the GGUF's, converted here)
TOKENIZER=(); [ ! -d "$P/source_tokenizer" ] || TOKENIZER=(--tokenizer "$P/source_tokenizer")
step source "$PY" -m experiments.decoder.source "$P/source.gguf" "$P/source" "${TOKENIZER[@]}" || exit 1
# shellcheck disable=SC2086
SIZES_ARGS=(--largest "$LARGEST" --fractions $FRACTIONS --sweep target="$P/uk/manifest.json"
            keep_vocab="$P/uk_src/manifest.json" extend="$P/uk_ext/manifest.json" --out "$WORK/sizes.json")
declare -A SIZES
for s in target keep_vocab extend; do
  SIZES[$s]=$("$PY" -m experiments.decoder.sizes "${SIZES_ARGS[@]}" --print "$s") || exit 1
done
echo "sizes: target ${SIZES[target]}; keep_vocab ${SIZES[keep_vocab]}; extend ${SIZES[extend]}" \
  | tee -a "$WORK/session.log"
BASE=$WORK/base.yaml
"$PY" -m experiments.uagec.base "$PHASE_STEPS" "$BASE" --config launch/configs/decoder_gpu.yaml || exit 1

# The --set items every run shares: the source, the rehearsal's engine and the training loop's time budget
# (TRAIN_S seconds, 0 = none; a run slower than planned ends its phases on time and is scored from its best
# checkpoint, since no checkpoint comes back from the device).
SET=(model.source="$P/source" "${ENGINE[@]}")
[ "$TRAIN_S" -gt 0 ] && SET+=("guard.max_train_minutes=$("$PY" -m experiments.uagec.budget "$TRAIN_S")")
# data DIR: the --set items of a sweep whose shards are P/DIR
data() {
  echo "data.train_shards=[$P/$1/manifest.json:train]"
  echo "data.valid_shards=[$P/$1/manifest.json:valid]"
}

# 3. The sweeps, side by side. Under BUDGET_S no run starts later than RUN_S + PACK_S seconds before the end.
RUN_S=${RUN_S:-180} PACK_S=${PACK_S:-45}
sweep_deadline
# sweep NAME DATA SIZES [ARG...]: xpt-ds sweep into OUT/NAME on the shards P/DATA, stopped when the budget (less
# PACK_S) ends.
sweep() {
  local name=$1 shards=$2 sizes=$3
  shift 3
  local set=("${SET[@]}")
  mapfile -t -O "${#set[@]}" set < <(data "$shards")
  # shellcheck disable=SC2086
  RESERVE_S=$PACK_S budget_run "$PY" -m xpt_ds.cli.sweep --config "$BASE" "${EVAL[@]}" --out "$OUT/$name" \
    --sizes $sizes --seeds $SEEDS --largest-first --rerun-changed "${DEADLINE[@]}" \
    --test-shards "$P/$shards/manifest.json:test" --unigram "$P/$shards/manifest.json:train" \
    --score-text en="$EN" uk="$UK" --probe-text en --drop-weights "${DRY[@]}" "$@" --set "${set[@]}"
}
DRY=()
[ "$MODE" = dry ] && DRY=(--dry-run)
run_sweeps() {
  # Scratch, XPT-SP and keep_vocab train every weight from their first step: the plan gives them the base's
  # phase-2 lr (2e-4); LoRA trains new parameters only: phase 1's (1e-3).
  step sweep_target sweep target uk "${SIZES[target]}" --parallel "$PARALLEL" \
    --methods scratch lora xpt_no_itl xpt xpt_sp xpt_subword_mean=xpt \
    --set "model.tokenizer=$P/uk/spm.model" xpt_subword_mean:model.embedding_init=subword_mean &
  step sweep_keep_vocab sweep keep_vocab uk_src "${SIZES[keep_vocab]}" --methods keep_vocab \
    --set model.tokenizer= &
  step sweep_extend sweep extend uk_ext "${SIZES[extend]}" --parallel 2 \
    --methods extend extend_subword_mean=extend \
    --set "model.tokenizer=$P/uk_ext_tok" extend_subword_mean:model.embedding_init=subword_mean &
  wait
}
# The sweeps, unless no run can start any more; then 4., the verdicts and the results file.
sweeps_then_pack
