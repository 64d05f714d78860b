#!/usr/bin/env bash
# Resuming a run from its ZeRO checkpoints, and exporting one as a plain Hugging Face model.
#
# usage:
#   CONFIG=run.yaml bash launch/resume_example.sh list                 [overrides ...]   (the default)
#   CONFIG=run.yaml bash launch/resume_example.sh resume [TAG]         [overrides ...]
#   CONFIG=run.yaml bash launch/resume_example.sh export OUT_DIR [TAG] [overrides ...]
#
# How resuming works:
#   * A run keeps its checkpoints in RUN_DIR/checkpoints/TAG/ (TAG = global_stepNNNNNNNNN). A checkpoint
#     counts only once RUN_DIR/checkpoints/TAG/COMPLETE exists: rank 0 writes it last, after every rank
#     has saved; a directory without it (a crash or preemption mid-save) is ignored.
#   * Rerunning the SAME training command resumes from the newest complete checkpoint (checkpoint.resume:
#     auto): `bash launch/single_node.sh`, `bash launch/multi_node.sh` on every node, or a requeued
#     launch/slurm.sbatch job. COMPLETE records the number of processes and the ZeRO stage it was saved
#     with; another number of processes (or stage 1 <-> 2) resumes through a universal checkpoint
#     (docs/cluster.md, "Resuming at another scale").
#   * `--resume TAG` resumes from a chosen complete checkpoint instead (`resume TAG` below does that);
#     `--checkpoint.resume=none` ignores the checkpoints (better: a fresh run_dir).
#   * `python -m xpt_ds.cli.export --run RUN_DIR [--tag TAG] --out DIR` turns a checkpoint of any ZeRO stage and
#     world size into a `save_pretrained` directory (model + tokenizer), on one process, without GPUs.
#
# subcommands:
#   list              complete checkpoints (tag, global step, world size), oldest first, and ignored ones
#   resume [TAG]      run the training command again through LAUNCH (default launch/single_node.sh);
#                     with TAG: from that checkpoint, which must be complete, or as --resume resolves
#                     `best` (RUN_DIR/best.json's tag, checkpoint.keep_best), `auto` or `none`
#   export OUT [TAG]  export the newest complete checkpoint (or TAG) to OUT
#
# environment: CONFIG (required), RUN_DIR (default: run_dir of CONFIG after overrides, relative to the
# repo root), LAUNCH (training launcher script for `resume`; it gets CONFIG and its own variables such as
# NUM_GPUS / HOSTFILE / DS_ACCELERATOR from the environment), PYTHON (default python).
#
# example (CPU):
#   CONFIG=launch/configs/demo.yaml bash launch/resume_example.sh list
#   DS_ACCELERATOR=cpu NUM_GPUS=2 CONFIG=launch/configs/demo.yaml bash launch/resume_example.sh resume global_step000000040
#   CONFIG=launch/configs/demo.yaml bash launch/resume_example.sh export demo_out/model
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"

cmd_name="${1:-list}"
[[ $# -eq 0 ]] || shift
tag=""
out=""
case "$cmd_name" in
  -h|--help|help) usage; exit 0 ;;
  list) ;;
  resume) if [[ $# -gt 0 && "$1" != -* ]]; then tag="$1"; shift; fi ;;
  export)
    [[ $# -gt 0 && "$1" != -* ]] || die "export needs an output directory: export OUT_DIR [TAG]"
    out="$1"; shift
    out="$(realpath -m "$out")"
    if [[ $# -gt 0 && "$1" != -* ]]; then tag="$1"; shift; fi ;;
  *) usage >&2; die "unknown subcommand '$cmd_name' (list, resume, export)" ;;
esac
overrides=("$@")

require_config "CONFIG is required (the run config the run was started with)"
export CONFIG

enter_repo   # cd to the repo root, where every launcher runs training, so relative run_dirs resolve the same way

if [[ -z "${RUN_DIR:-}" ]]; then
  RUN_DIR="$("$PYTHON" -c 'import sys
from xpt_ds.config import load_config
print(load_config(sys.argv[1], sys.argv[2:]).run_dir)' "$CONFIG" "${overrides[@]}")"
fi
RUN_DIR="$(cd "$REPO" && realpath -m "$RUN_DIR")"
CKPT="$RUN_DIR/checkpoints"

# Complete tags, oldest first (tags are zero-padded step numbers, so the glob's order is the step order).
complete_tags() {
  local marker
  for marker in "$CKPT"/*/COMPLETE; do
    [[ -f "$marker" ]] && basename "$(dirname "$marker")"
  done
  return 0
}

case "$cmd_name" in
  list)
    echo "run dir: $RUN_DIR"
    found=0
    for dir in "$CKPT"/*/; do
      [[ -d "$dir" ]] || continue
      t="$(basename "$dir")"
      if [[ "$t" == abandoned ]]; then
        echo "  $t/  checkpoints of branches left by a resume from an older tag ($(ls "$dir" | paste -sd ' '))"
        continue
      elif [[ "$t" == phase_ends ]]; then
        echo "  $t/  the ends of phases that later phases start from ($(ls "$dir" | paste -sd ' '))"
        continue
      elif [[ -f "$dir/COMPLETE" ]]; then
        echo "  $t  complete  $(cat "$dir/COMPLETE")"
        found=1
      else
        echo "  $t  INCOMPLETE (no COMPLETE marker: ignored by resume and export)"
      fi
    done
    if ((found)); then
      echo "newest complete: $(complete_tags | tail -n1)"
    else
      echo "no complete checkpoint yet: training starts from scratch"
    fi
    ;;
  resume)
    LAUNCH="${LAUNCH:-$REPO/launch/single_node.sh}"
    resume_args=()
    if [[ -n "$tag" ]]; then
      # what the trainer's --resume resolves TAG to (best: best.json's tag; auto, none), or its one-line error
      resolved="$("$PYTHON" - "$CKPT" "$tag" <<'PY'
import sys
from pathlib import Path
from xpt_ds.checkpoint.tags import CheckpointError, resolve_tag
try:
    print(resolve_tag(Path(sys.argv[1]), sys.argv[2], "resume", ("auto", "none")) or "")
except CheckpointError as e:
    sys.exit(f"resume_example.sh: {e}")
PY
)" || exit 2
      resume_args=(--resume "$tag")
      [[ "$resolved" == "$tag" ]] || tag="$tag (${resolved:-no checkpoint: from scratch})"
      echo "resuming $RUN_DIR from $tag" >&2
    else
      newest="$(complete_tags | tail -n1)"
      echo "resuming $RUN_DIR from ${newest:-scratch (no complete checkpoint)}" >&2
    fi
    exec bash "$LAUNCH" "${resume_args[@]}" "${overrides[@]}"
    ;;
  export)
    export_args=(--run "$RUN_DIR" --out "$out")
    [[ -z "$tag" ]] || export_args+=(--tag "$tag")
    echo "+ $PYTHON -m xpt_ds.cli.export ${export_args[*]}" >&2
    "$PYTHON" -m xpt_ds.cli.export "${export_args[@]}"
    echo "load it with: AutoModelForMaskedLM.from_pretrained('$out'), AutoTokenizer.from_pretrained('$out')" >&2
    ;;
esac
