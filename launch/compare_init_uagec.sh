#!/usr/bin/env bash
# Where the new embeddings start (issue 11), offline on CPU: English all-MiniLM-L6-v2 -> Ukrainian UA-GEC.
#   bash launch/compare_init_uagec.sh [OUT]      OUT defaults to sweeps/init_uagec; SKIP_INSTALL=1 reuses the environment
#   NAMES="focus focus_word2vec" REPLICATES= bash launch/compare_init_uagec.sh sweeps/init_focus   only those runs
# Post-trains XPT (launch/configs/uagec_init_compare.yaml: STEPS/2 frozen + STEPS/2 all trainable) once per
# model.embedding_init strategy, and Gogoulou et al.'s two transfers (003: launch/configs/gogoulou_*.yaml at
# their lr 5e-5, all trainable) for the same STEPS optimizer steps of the same MICRO_BATCH x 128-token batches. Every run
# is scored on the held-out test text (xpt_ds.cli.evaluate, the same seeded masks; the keep_vocab run on shards of
# the same documents made by the source's tokenizer) next to the unigram predictor of its own vocabulary;
# then every run is exported and fine-tuned on UA-GEC's sentence label (FT_TRAIN sentences, FT_SEEDS seeds). Preparation, all with data_tools: English-Ukrainian
# Bible pairs aligned in both directions give the bilingual dictionary; word2vec embeddings of the Ukrainian
# pieces (UA-GEC train) and of the English WordPiece tokens (the Bible's English side); Procrustes maps the
# Ukrainian ones into the English static space (aligned) and into the source's input-embedding space (the
# from_file start); fastText embeddings of the Ukrainian piece strings with FOCUS's defaults (focus; the run
# focus_word2vec, not in the default NAMES, is focus on the word2vec space instead). NAMES (space-separated)
# runs only those runs; the Bible is prepared only when one of them needs it, and REPLICATES= runs no replicate.
# Report: OUT/results.md, OUT/summary.json, OUT/valid_curves.png (python -m experiments.uagec.compare_init).
# Rerunning the command skips what is finished.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-sweeps/init_uagec}
STEPS=${STEPS:-400}
MICRO_BATCH=${MICRO_BATCH:-4}
read -ra NAMES <<<"${NAMES:-random source_mean frequency_rank overlap_copy focus aligned from_file gogoulou_lang_en_en \
  gogoulou_lang_en_lang}"
source launch/uagec_lib.sh
prepare_uagec
if [[ " ${NAMES[*]} " =~ \ (aligned|from_file)\  ]]; then
  prepare_bible
  prepare_static
  # The Procrustes maps (the dictionary supervises): into the English static space (aligned) and into the
  # source's input-embedding space (the from_file start).
  [ -f "$PREP/emb/uk_on_en.npy" ] || "$PY" -m data_tools.cli.align_embeddings procrustes --target "$PREP/emb/uk.npy" \
    --source "$PREP/emb/en.npy" --dictionary "$PREP/parallel/dictionary.tsv" --out "$PREP/emb/uk_on_en" \
    --source-first-row 1996
  [ -f "$PREP/emb/uk_on_minilm.npy" ] || "$PY" -m data_tools.cli.align_embeddings procrustes \
    --target "$PREP/emb/uk.npy" --source "$PREP/emb/minilm.npy" --dictionary "$PREP/parallel/dictionary.tsv" \
    --out "$PREP/emb/uk_on_minilm" --source-first-row 1996
else
  prepare_target_static
fi
if [[ " ${NAMES[*]} " == *" focus "* ]]; then prepare_focus_static; fi

# run_args NAME: sets CONFIG, SHARDS and ARGS (that run's own overrides).
run_args() {
  CONFIG=uagec_init_compare SHARDS=demo_out/uk
  ARGS=(--phases.0.steps=$((STEPS / 2)) --phases.1.steps=$((STEPS - STEPS / 2)) --model.embedding_init="$1")
  case $1 in
    focus) ARGS+=("--model.embedding_init_args={static: $PREP/emb/uk_focus.npy}") ;;
    focus_word2vec)  # focus on the word2vec space of piece ids (uk), as before FOCUS's fastText space
      ARGS[2]=--model.embedding_init=focus
      ARGS+=("--model.embedding_init_args={static: $PREP/emb/uk.npy}") ;;
    aligned) ARGS+=("--model.embedding_init_args={target: $PREP/emb/uk_on_en.npy, source: $PREP/emb/en.npy}") ;;
    from_file) ARGS+=("--model.embedding_init_args={path: $PREP/emb/uk_on_minilm.npy}") ;;
    gogoulou_lang_en_en)  # [lang->en][en]: new vocabulary, rows by frequency rank, no ITLs
      CONFIG=gogoulou_frequency_rank
      ARGS=(--phases.0.steps="$STEPS" --model.tokenizer=demo_out/uk/spm.model) ;;
    gogoulou_lang_en_lang)  # [lang->en][lang]: the source's own vocabulary, embeddings and LM head
      CONFIG=gogoulou_keep_vocab SHARDS=demo_out/uk_src
      ARGS=(--phases.0.steps="$STEPS") ;;
  esac
  ARGS+=("--data.train_shards=[$SHARDS/manifest.json:train]" "--data.valid_shards=[$SHARDS/manifest.json:valid]")
}
write_finetune_train
for name in "${NAMES[@]}"; do
  run_args "$name"
  train "$name" "$CONFIG" "${ARGS[@]}"
  score "$name" "$SHARDS"
  # The unigram predictor on the validation tokens the run's own curve is scored on (10 micro-batches).
  [ -f "$OUT/eval/$name.unigram_valid.json" ] || "$PY" -m xpt_ds.cli.evaluate --run "$OUT/runs/$name" \
    --batch-size "$MICRO_BATCH" --max-batches 10 --shards "$SHARDS/manifest.json:valid" \
    --unigram "$SHARDS/manifest.json:train" --out "$OUT/eval/$name.unigram_valid.json" >/dev/null
done
# Downstream, once every run is scored: export each and fine-tune it on the sentence label.
for name in "${NAMES[@]}"; do finetune "$name"; done
# Seed replicates (model.init_seed 2, everything else equal) of the REPLICATES starts, scored on the test text.
REPLICATES=${REPLICATES-random source_mean frequency_rank overlap_copy focus}
for name in $REPLICATES; do
  [[ " ${NAMES[*]} " == *" $name "* ]] || continue
  run_args "$name"
  train "$name.seed2" "$CONFIG" "${ARGS[@]}" --model.init_seed=2
  score "$name" "$SHARDS" .seed2
done
"$PY" -m experiments.uagec.compare_init --out "$OUT" --steps "$STEPS" --batch "$MICRO_BATCH"
say "done: $OUT/results.md"
