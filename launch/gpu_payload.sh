#!/usr/bin/env bash
# Packs what launch/gpu_uagec.sh (issue 22) reads on a lent GPU machine, which reaches no package registry and
# takes at most 64 MiB per call (the working tree included): the English source all-MiniLM-L6-v2 (its files as
# they are, 91 MB), UA-GEC's 8,000-piece shards and the same documents in the source's vocabulary, the
# sentence-label fine-tuning files, the from_file start (UA-GEC piece embeddings mapped onto MiniLM's input
# embeddings by Procrustes over the Bible dictionary), and TreLM's English MLM shards and Bible pairs.
#   bash launch/gpu_payload.sh [DIR]     DIR defaults to .gpu-payload (git-ignored through .git/info/exclude)
# Writes DIR/part1, DIR/part2, ... (each a folder holding one slice of one .tar.gz, at most PART_MB MiB) and
# DIR/payload.sha256. Carry part1 in the first device call, part2 in the next and so on, .gpu-kit with the last
# one only (a call carries at most 64 MiB: the 4.4 MiB tree, a 56 MiB slice; the last slice, .gpu-kit's 4.5 MiB
# and the tree): 2 calls for the 104.5 MiB payload of 2026-11-26. Each call moves its slice to /tmp/xpt_payload
# on the machine (the machine keeps /tmp while it stays warm), and launch/gpu_uagec.sh --payload
# /tmp/xpt_payload joins, checks and unpacks them. Preparation runs on this CPU machine with data_tools
# (launch/uagec_lib.sh); rerunning skips what is prepared.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu-payload}
PART_MB=${PART_MB:-56}
source launch/session_steps.sh  # slice_payload
OUT=${PREP_OUT:-sweeps/gpu_prep} MICRO_BATCH=1  # uagec_lib.sh's OUT (its PREP, finetune_train.jsonl)
FT_TRAIN=${FT_TRAIN:-4000}
source launch/uagec_lib.sh
prepare_uagec
prepare_bible
prepare_static
prepare_english
[ -f "$PREP/emb/uk_on_minilm.npy" ] || "$PY" -m data_tools.cli.align_embeddings procrustes --target "$PREP/emb/uk.npy" \
  --source "$PREP/emb/minilm.npy" --dictionary "$PREP/parallel/dictionary.tsv" --out "$PREP/emb/uk_on_minilm" \
  --source-first-row 1996
write_finetune_train

say "staging"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/payload/labels" "$STAGE/payload/emb"
cp -r "$SOURCE" "$STAGE/payload/source"
for d in demo_out/uk demo_out/uk_src "$PREP/en_src" "$PREP/parallel"; do
  mkdir -p "$STAGE/payload/$(basename "$d")"
  find "$d" -maxdepth 1 -type f \( -name '*.tar' -o -name '*.json' -o -name 'spm.*' -o -name '*.tsv' \) \
    -exec cp {} "$STAGE/payload/$(basename "$d")/" \;
done
cp "$OUT/finetune_train.jsonl" demo_out/uagec/labels/test.jsonl "$STAGE/payload/labels/"
cp "$PREP/emb/uk_on_minilm.npy" "$PREP/emb/uk_on_minilm.json" "$STAGE/payload/emb/"  # the array and its sidecar
slice_payload "$STAGE" "$DIR"
