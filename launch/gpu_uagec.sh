#!/usr/bin/env bash
# Issue 22 on one lent GPU: does XPT work at a compute where the models leave the unigram regime?
# English all-MiniLM-L6-v2 -> Ukrainian UA-GEC, bf16 (launch/configs/uagec_gpu.yaml), every run stopped early
# on its validation loss and scored, exported and fine-tuned from its best checkpoint.
#   bash launch/gpu_uagec.sh OUT [--payload DIR] [--rehearse | --pack | --dry-run]
# --payload DIR: where the device calls left launch/gpu_payload.sh's slices (default /tmp/xpt_payload); they
#   are joined, checked against payload.sha256 and unpacked into DIR/payload once.
# --rehearse: the same steps on this CPU with tiny settings (steps, sizes, batch; the same bf16 ZeRO-1 engine),
#   to keep the script working; launch/gpu_payload.sh .gpu-payload first, then --payload .gpu-payload.
# --dry-run: on any machine, what the GPU's sweeps would do with OUT (xpt-ds sweep --dry-run: skip, rerun,
#   resume or start, run by run), with the GPU's settings and nothing written to OUT. Give the payload the
#   GPU's path, whose files the runs' configs name: ln -sfn "$PWD/.gpu-payload/payload" /tmp/xpt_payload/payload.
# The script ends within BUDGET_S seconds of its start (GPU default 540: a device call runs at most 600 s, and a
# session has 15 minutes of device time in all), packed: no run starts later than RUN_S (its planned length,
# default 240 s) before the end, runs still going at the end are stopped (SIGTERM: they checkpoint, as when
# preempted), and the last PACK_S seconds (default 45) pack what finished. A later session unpacks the
# results.tgz into its OUT and goes on: finished runs are skipped, unless their config or arguments changed
# (xpt-ds sweep --rerun-changed: the old row and run directory are kept aside, the run starts over).
# Steps, each one's log in OUT/NAME.log and exit code and seconds in OUT/steps.tsv as it finishes:
#   1. unpack the payload; on the GPU install .gpu-kit/ and xpt-ds;
#   2. steps per phase: PHASE_STEPS (default 3000, uagec_gpu.yaml's cap; one-phase methods get both phases'),
#      every phase ending early when 5 validations in a row (every 100 steps) do not lower the validation loss,
#      or when it used its share of TRAIN_S (default 150 s on the GPU, 0 = no limit: guard.max_train_minutes),
#      and every run scored from its best checkpoint; OUT/pilot.json records the rule. PILOT_STEPS=N (> 0) runs
#      a pilot first instead: Scratch and XPT at the largest size, capped at N steps per phase; the sweeps' steps
#      per phase are then 1.25x the later of their best-checkpoint steps, rounded up to 100, halved per phase;
#   3. five sweeps side by side on the one GPU, each writing a row per run as it finishes, the largest size's
#      runs (every seed) first, then seed 1 of everything before seed 2:
#      main: Scratch, Adapters, XPT-SP, XPT at SIZES (nested; the smallest 1/8 of the largest);
#      init: XPT from source_mean, frequency_rank and from_file starts at the largest size (main's XPT is the
#            random start);
#      other: TreLM (its phase graph with English MLM and CdLM over the Bible pairs) in the target vocabulary,
#            and Gogoulou et al.'s keep-vocabulary transfer in the source's vocabulary (own test shards);
#      rewind: XPT with guard.early_stop_rewind at the two smallest sizes (phase 2 starts from phase 1's best
#            checkpoint where early stopping ended phase 1), beside main's XPT;
#      every run fine-tuned on UA-GEC's sentence label with FT_SEEDS seeds (main: at every size);
#   4. OUT/claims.md (python -m experiments.uagec.claims: every arm beside the unigram predictor, one verdict per
#      claim), and OUT/results.tgz: every sweep's results, plots and TensorBoard events, and each run's status,
#      best.json, eval and fine-tuning results (no weights).
#   bash launch/gpu_uagec.sh OUT --pack   does step 4 at any time, on what has finished: the report of each sweep
#   not finished (no exit-0 line in steps.tsv) is rewritten from its results.jsonl rows so far (no TensorBoard
#   scalars: those stay the sweep's own), then claims.md and results.tgz.
# The decisions are Python, tested (experiments/uagec/: base, pilot, budget, pack); this script runs the steps.
set -uo pipefail
cd "$(dirname "$0")/.."
source launch/session_steps.sh  # session_args, step, budget_run, budget_left, unpack_payload, pack_study,
#                                 sweep_deadline, sweeps_then_pack
session_args "$0" "$@"

# 4 (and --pack): the verdicts (OUT/claims.md), then everything but the weights in OUT/results.tgz.
pack() {
  pack_study experiments.uagec.pack
}
if [ "$MODE" = pack ]; then
  pack && echo "[$(date +%T)] packed: $OUT/results.tgz" | tee -a "$OUT/session.log"
  exit
fi

# WORK: where the script writes its base configs and pilot.json (a dry run: a temporary folder, OUT untouched)
WORK=$OUT
[ "$MODE" = dry ] && dry_steps
step unpack unpack_payload source/config.json || exit 1
P=$(cd "$PAYLOAD/payload" && pwd)

if [ "$MODE" = rehearse ]; then
  export DS_ACCELERATOR=cpu OMP_NUM_THREADS=1
  SIZES=${SIZES:-20K 160K} PILOT_STEPS=${PILOT_STEPS:-0} PHASE_STEPS=${PHASE_STEPS:-6} PARALLEL=${PARALLEL:-2}
  FT_SEEDS=${FT_SEEDS:-1 2} SEEDS=${SEEDS:-1 2} FT_ROWS=${FT_ROWS:-64} TRAIN_S=${TRAIN_S:-0}
  ENGINE=(optim.micro_batch_size=4 logging.eval_every=2
          logging.eval_batches=2 logging.log_every=2 data.num_workers=0 guard.early_stop_patience=2)
  EVAL=(--eval-batch-size 4 --eval-max-batches 4)
  FT=(--finetune-epochs 1 --finetune-max-length 32)
elif [ "$MODE" = dry ]; then  # the GPU's settings below
  export DS_ACCELERATOR=cpu
else
  export DS_ACCELERATOR=cuda
  step install "$PY" -m pip install -q --no-deps --no-build-isolation --no-index --find-links .gpu-kit \
    hjson pydantic pydantic-core annotated-types typing-inspection webdataset braceexpand deepspeed || exit 1
  step install_xpt "$PY" -m pip install -q --no-deps --no-build-isolation -e . || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt" 2>&1
fi
if [ "$MODE" != rehearse ]; then
  SIZES=${SIZES:-75K 150K 300K 600K} PILOT_STEPS=${PILOT_STEPS:-0} PARALLEL=${PARALLEL:-4}
  FT_SEEDS=${FT_SEEDS:-1 2 3} SEEDS=${SEEDS:-1 2} FT_ROWS=${FT_ROWS:-0} BUDGET_S=${BUDGET_S-540}
  TRAIN_S=${TRAIN_S:-150}
  ENGINE=()
  EVAL=(--eval-batch-size 64)
  FT=(--finetune-epochs 3 --finetune-max-length 64)
fi
read -ra SIZE_LIST <<<"$SIZES"
LARGEST=${SIZE_LIST[-1]}
FT_TRAIN=$P/labels/finetune_train.jsonl FT_TEST=$P/labels/test.jsonl
if [ "$FT_ROWS" -gt 0 ]; then  # the rehearsal fine-tunes and scores on FT_ROWS sentences of each
  head -n "$FT_ROWS" "$FT_TRAIN" >"$OUT/finetune_train.jsonl"
  head -n "$FT_ROWS" "$FT_TEST" >"$OUT/finetune_test.jsonl"
  FT_TRAIN=$OUT/finetune_train.jsonl FT_TEST=$OUT/finetune_test.jsonl
fi
# shellcheck disable=SC2206
FT+=(--finetune-train "$FT_TRAIN" --finetune-test "$FT_TEST" --finetune-seeds $FT_SEEDS)
# The --set items every run shares: the payload's source and target-language data, the rehearsal's engine, and
# the training loop's time budget (TRAIN_S seconds, 0 = none): a run must end, scored, inside RUN_S, or it starts
# over in the next session (no checkpoint comes back from the device), so a run slower than planned ends its
# phases early on time (guard.max_train_minutes, each phase a share) and is scored from its best checkpoint.
SET=(model.source="$P/source" model.tokenizer="$P/uk/spm.model" "data.train_shards=[$P/uk/manifest.json:train]"
     "data.valid_shards=[$P/uk/manifest.json:valid]" "${ENGINE[@]}")
[ "$TRAIN_S" -gt 0 ] && SET+=("guard.max_train_minutes=$("$PY" -m experiments.uagec.budget "$TRAIN_S")")

# base STEPS: WORK/base_STEPS.yaml, launch/configs/uagec_gpu.yaml with STEPS per phase (experiments.uagec.base).
base() {
  "$PY" -m experiments.uagec.base "$1" "$WORK/base_$1.yaml" && echo "$WORK/base_$1.yaml"
}
# sweep NAME STEPS [ARG...]: python -m xpt_ds.cli.sweep into OUT/NAME, STEPS per phase of the base, stopped when the
# budget (less RESERVE_S) ends.
sweep() {
  local name=$1 config
  config=$(base "$2") || return 1
  shift 2
  budget_run "$PY" -m xpt_ds.cli.sweep --config "$config" "${EVAL[@]}" --out "$OUT/$name" "$@"
}

# 2. Steps per phase: a fixed cap with early stopping, or from a pilot (PILOT_STEPS > 0).
RUN_S=${RUN_S:-240} PACK_S=${PACK_S:-45}
if [ "$PILOT_STEPS" -gt 0 ]; then
  RESERVE_S=$PACK_S step pilot sweep pilot "$PILOT_STEPS" --methods scratch xpt --sizes "$LARGEST" \
    --seeds 1 --parallel 2 --test-shards "$P/uk/manifest.json:test" --unigram "$P/uk/manifest.json:train" \
    --set "${SET[@]}"
fi
# WORK/pilot.json records the rule (experiments.uagec.pilot)
PHASE_STEPS=$("$PY" -m experiments.uagec.pilot --work "$WORK" --pilot-steps "$PILOT_STEPS" \
  --phase-steps "${PHASE_STEPS:-}" --train-seconds "$TRAIN_S") \
  || { echo "no steps per phase: see $OUT/pilot.log" >&2; exit 1; }
echo "sweep steps per phase: $PHASE_STEPS" | tee -a "$WORK/session.log"

# 3. The sweeps, side by side (PARALLEL + 5 runs at a time on the one GPU). Under BUDGET_S no run starts later
# than RUN_S + PACK_S seconds before the end, and whatever still runs at PACK_S before the end is stopped.
sweep_deadline
# run_sweeps: the five sweeps side by side, each a step of its own.
run_sweeps() {
  TEST=(--test-shards "$P/uk/manifest.json:test" --unigram "$P/uk/manifest.json:train")
  # shellcheck disable=SC2086
  COMMON=(--seeds $SEEDS --rerun-changed "${DEADLINE[@]}" "${FT[@]}")
  [ "$MODE" = dry ] && COMMON+=(--dry-run)
  RESERVE_S=$PACK_S
  # Scratch and XPT-SP train every weight from their first step, so the plan gives them the base's phase-2 lr
  # (3e-4, the one it gives every weight; xpt_ds.sweeps.plan.schedule_source): at its phase-1 lr (1e-3, meant for
  # XPT's new parameters alone) both stayed at the unigram predictor in 2026-11-27's H200 runs (RESULTS.md).
  # XPT-SP is then XPT without its frozen phase, as 002 defines it. Adapters train only new parameters: 1e-3.
  step sweep_main sweep main "$PHASE_STEPS" --methods scratch adapters xpt_sp xpt --sizes "${SIZE_LIST[@]}" \
    --parallel "$PARALLEL" --largest-first "${TEST[@]}" "${COMMON[@]}" --set "${SET[@]}" &
  step sweep_init sweep init "$PHASE_STEPS" --methods xpt_source_mean=xpt xpt_frequency_rank=xpt \
    xpt_from_file=xpt --sizes "$LARGEST" "${TEST[@]}" "${COMMON[@]}" --set "${SET[@]}" \
    xpt_source_mean:model.embedding_init=source_mean xpt_frequency_rank:model.embedding_init=frequency_rank \
    xpt_from_file:model.embedding_init=from_file \
    "xpt_from_file:model.embedding_init_args={path: $P/emb/uk_on_minilm.npy}" &
  step sweep_other_trelm sweep other_trelm "$PHASE_STEPS" --methods trelm --sizes "$LARGEST" "${TEST[@]}" \
    "${COMMON[@]}" --set "${SET[@]}" "data.source_shards=[$P/en_src/manifest.json:train]" \
    "data.parallel_shards=[$P/parallel/manifest.json:train]" &
  # keep_vocab reads the same documents in the source's vocabulary: its own shards, test text and unigram.
  # keep_vocab at lr 1e-4: Gogoulou et al. train every weight at 5e-5 for 210K steps; this run has thousands.
  step sweep_other_keep_vocab sweep other_keep_vocab "$PHASE_STEPS" --methods keep_vocab --sizes "$LARGEST" \
    --test-shards "$P/uk_src/manifest.json:test" --unigram "$P/uk_src/manifest.json:train" "${COMMON[@]}" \
    --set "${SET[@]}" model.tokenizer= "data.train_shards=[$P/uk_src/manifest.json:train]" \
    "data.valid_shards=[$P/uk_src/manifest.json:valid]" phases.0.lr=1e-4 &
  # 2026-11-28 (H200): XPT's phase 1 at 75K early-stopped 500 steps past its best, and phase 2, starting there,
  # never validated lower, so XPT at 75K was scored as its phase-1 model (RESULTS.md). The same runs with phase 2
  # starting from phase 1's best checkpoint; where the time budget ends phase 1 instead, they equal main's XPT.
  step sweep_rewind sweep rewind "$PHASE_STEPS" --methods xpt_rewind=xpt --sizes "${SIZE_LIST[@]:0:2}" \
    --parallel 2 "${TEST[@]}" "${COMMON[@]}" --set "${SET[@]}" xpt_rewind:guard.early_stop_rewind=true &
  wait
}
# The sweeps, unless no run can start any more; then 4., the verdicts and the results file.
sweeps_then_pack
