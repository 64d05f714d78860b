#!/usr/bin/env bash
# TreLM (issue 12, seed 004) against XPT and Scratch, offline on CPU: English all-MiniLM-L6-v2 -> Ukrainian
# UA-GEC, with the English-Ukrainian Bible for TreLM's English MLM and CdLM.
#   bash launch/compare_trelm_uagec.sh [OUT]     OUT defaults to sweeps/trelm_uagec; SKIP_INSTALL=1 reuses the
#                                                environment; PREP=DIR reuses compare_init_uagec.sh's preparation
# Equal compute: every run forwards and backpropagates 1,600 rows of 128 tokens (STEPS x MICRO_BATCH for XPT and
# Scratch; launch/configs/trelm_uagec.yaml's four phases for TreLM). Runs:
# - scratch, xpt (source_mean, launch/configs/uagec_init_compare.yaml), trelm (the three phases with CdLM);
# - 004 Table 7 at small scale: trelm_no_cdlm (the branches train English MLM instead of CdLM; 004 used MLM +
#   TLM, which xpt-ds does not have) and trelm_no_cdlm_no_tri (also without the TRILayer: method trelm_no_tri);
# - 004 Table 5 at small scale: the commonality phase alone (GRID_STEPS steps) from four word-embedding starts:
#   random, fastText (the static UA-GEC embeddings as they are), fastText + adversarial (mapped onto MiniLM's
#   input embeddings by data_tools.cli.align_embeddings adversarial, scaled down), and source_mean.
# Every run is scored on UA-GEC's test text (bits per word and per character, same seeded masks) beside the
# vocabulary's unigram predictor; the five full runs are exported and fine-tuned on UA-GEC's sentence label.
# Report: OUT/results.md, OUT/summary.json, OUT/valid_curves.png (python -m experiments.uagec.compare_trelm).
# Rerunning the command skips what is finished.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-sweeps/trelm_uagec}
MICRO_BATCH=4  # launch/configs/trelm_uagec.yaml's phase lengths assume 4 rows per group
GRID_STEPS=${GRID_STEPS:-100}
source launch/uagec_lib.sh
prepare_uagec
prepare_bible
prepare_static
prepare_english
[ -f "$PREP/emb/uk_adv.npy" ] || "$PY" -m data_tools.cli.align_embeddings adversarial --target "$PREP/emb/uk.npy" \
  --source "$PREP/emb/minilm.npy" --out "$PREP/emb/uk_adv" --source-first-row 1996 --epochs 5 --iterations 1000 \
  --dis-hidden 512

TARGET=("--data.train_shards=[demo_out/uk/manifest.json:train]" "--data.valid_shards=[demo_out/uk/manifest.json:valid]")
ENGLISH=("--data.source_shards=[$PREP/en_src/manifest.json:train]")
PAIRS=("--data.parallel_shards=[$PREP/parallel/manifest.json:train]")
NO_CDLM=("--phases.1.objectives=[mlm_target,mlm_source]" "--phases.2.objectives=[mlm_target,mlm_source]"
         "--data.parallel_shards=[]")
FULL=(trelm trelm_no_cdlm trelm_no_cdlm_no_tri xpt scratch)
GRID=(random fasttext fasttext_adversarial source_mean)
write_finetune_train
for name in "${FULL[@]}"; do
  case $name in
    scratch) train "$name" uagec_init_compare "${TARGET[@]}" --model.method=scratch \
        '--phases.0.trainable=["@all"]' '--phases.1.trainable=["@all"]' --phases.0.lr=5e-4 ;;
    xpt) train "$name" uagec_init_compare "${TARGET[@]}" --model.embedding_init=source_mean ;;
    trelm) train "$name" trelm_uagec "${ENGLISH[@]}" "${PAIRS[@]}" ;;
    trelm_no_cdlm) train "$name" trelm_uagec "${ENGLISH[@]}" "${NO_CDLM[@]}" ;;
    trelm_no_cdlm_no_tri) train "$name" trelm_uagec "${ENGLISH[@]}" "${NO_CDLM[@]}" --model.method=trelm_no_tri ;;
  esac
  score "$name" demo_out/uk
done
for start in "${GRID[@]}"; do
  case $start in
    random) init=(--model.embedding_init=random) ;;
    fasttext) init=(--model.embedding_init=from_file "--model.embedding_init_args={path: $PREP/emb/uk.npy}") ;;
    fasttext_adversarial) init=(--model.embedding_init=from_file
                                "--model.embedding_init_args={path: $PREP/emb/uk_adv.npy}") ;;
    source_mean) init=(--model.embedding_init=source_mean) ;;
  esac
  train "common_$start" trelm_uagec "${ENGLISH[@]}" "--data.parallel_shards=[]" "${init[@]}" \
    --logging.eval_every=$((GRID_STEPS / 2)) \
    "--phases=[{name: common, steps: $GRID_STEPS, lr: 1.0e-3, warmup_steps: $((GRID_STEPS / 10)),
                trainable: ['@all', '!@encoder'], objectives: [mlm_target, mlm_source]}]"
  score "common_$start" demo_out/uk
done
for name in "${FULL[@]}"; do finetune "$name"; done
"$PY" -m experiments.uagec.compare_trelm --out "$OUT" --grid-steps "$GRID_STEPS"
say "done: $OUT/results.md"
