#!/usr/bin/env bash
# Train on one node with N processes through the DeepSpeed launcher (`deepspeed --module xpt_ds.train`).
#
# usage:
#   CONFIG=run.yaml [NUM_GPUS=N] [MASTER_PORT=P] bash launch/single_node.sh [--section.key=value ...] [--resume TAG]
#   bash launch/single_node.sh --config run.yaml [--num_gpus N] [--master_port P] [--] [overrides ...]
#
# Every argument that is not one of the flags above is handed to `python -m xpt_ds.train` unchanged
# (config overrides such as --optim.micro_batch_size=4, or --resume TAG). Rerunning the same command
# resumes from the newest complete checkpoint in RUN_DIR/checkpoints (checkpoint.resume: auto).
#
# environment:
#   CONFIG          run config (YAML/JSON), required; relative paths inside it are relative to the repo root,
#                   which is the working directory of the run
#   NUM_GPUS        processes to start; default: every visible GPU (CUDA_VISIBLE_DEVICES, else nvidia-smi),
#                   1 if there is none. With CUDA_VISIBLE_DEVICES=2,3 the run uses exactly GPUs 2 and 3.
#   MASTER_PORT     rendezvous port on 127.0.0.1; default: a free port
#   DS_ACCELERATOR  `cpu` for CPU-only training (NUM_GPUS is then the number of CPU processes, default 1)
#   LAUNCHER_ARGS   extra `deepspeed` launcher flags, space-separated (e.g. "--bind_cores_to_rank")
#   PYTHON          interpreter (default: python); DEEPSPEED: launcher (default: deepspeed on PATH, else
#                   `$PYTHON -m deepspeed.launcher.runner`)
#   DRY_RUN=1       print the command instead of running it
#
# example (CPU): DS_ACCELERATOR=cpu NUM_GPUS=2 CONFIG=launch/configs/demo.yaml bash launch/single_node.sh
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
die() { echo "single_node.sh: $*" >&2; exit 2; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"

overrides=()
while (($#)); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --config) (($# >= 2)) || die "--config needs a value"; CONFIG="$2"; shift 2 ;;
    --config=*) CONFIG="${1#*=}"; shift ;;
    --num_gpus|--num-gpus) (($# >= 2)) || die "$1 needs a value"; NUM_GPUS="$2"; shift 2 ;;
    --num_gpus=*|--num-gpus=*) NUM_GPUS="${1#*=}"; shift ;;
    --master_port|--master-port) (($# >= 2)) || die "$1 needs a value"; MASTER_PORT="$2"; shift 2 ;;
    --master_port=*|--master-port=*) MASTER_PORT="${1#*=}"; shift ;;
    --) shift; overrides+=("$@"); break ;;
    *) overrides+=("$1"); shift ;;
  esac
done

[[ -n "${CONFIG:-}" ]] || { usage >&2; die "CONFIG is required (CONFIG=FILE or --config FILE)"; }
[[ -f "$CONFIG" ]] || die "config file not found: $CONFIG"
CONFIG="$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")"

# Comma-separated integer list in CUDA_VISIBLE_DEVICES, if that is what it holds.
visible=""
if [[ "${DS_ACCELERATOR:-}" != cpu && "${CUDA_VISIBLE_DEVICES:-}" =~ ^[0-9]+(,[0-9]+)*$ ]]; then
  visible="$CUDA_VISIBLE_DEVICES"
fi

count_devices() {
  if [[ "${DS_ACCELERATOR:-}" == cpu ]]; then
    echo 1
  elif [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .
  elif command -v nvidia-smi >/dev/null 2>&1; then
    local n
    n="$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c . || true)"
    echo "$(( n > 0 ? n : 1 ))"
  else
    echo 1
  fi
}

NUM_GPUS="${NUM_GPUS:-$(count_devices)}"
[[ "$NUM_GPUS" =~ ^[1-9][0-9]*$ ]] || die "NUM_GPUS must be a positive integer, got '$NUM_GPUS'"

if [[ -z "${MASTER_PORT:-}" ]]; then
  MASTER_PORT="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
fi
[[ "$MASTER_PORT" =~ ^[0-9]+$ ]] || die "MASTER_PORT must be a port number, got '$MASTER_PORT'"

if [[ -n "${DEEPSPEED:-}" ]]; then
  read -r -a launcher <<<"$DEEPSPEED"
elif command -v deepspeed >/dev/null 2>&1; then
  launcher=(deepspeed)
else
  launcher=("$PYTHON" -m deepspeed.launcher.runner)
fi

extra=()
[[ -z "${LAUNCHER_ARGS:-}" ]] || read -r -a extra <<<"$LAUNCHER_ARGS"

# The launcher drops CUDA_VISIBLE_DEVICES and renumbers from 0 when --num_gpus is given; --include keeps
# the user's selection (the first NUM_GPUS of it).
if [[ -n "$visible" ]]; then
  IFS=',' read -r -a ids <<<"$visible"
  ((NUM_GPUS <= ${#ids[@]})) || die "NUM_GPUS=$NUM_GPUS but CUDA_VISIBLE_DEVICES=$visible lists ${#ids[@]} devices"
  sel="$(IFS=','; echo "${ids[*]:0:NUM_GPUS}")"
  devices=(--include "localhost:$sel")
else
  devices=(--num_gpus "$NUM_GPUS")
fi

cd "$REPO"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

cmd=("${launcher[@]}" "${devices[@]}" --master_port "$MASTER_PORT" "${extra[@]}"
     --module xpt_ds.train --config "$CONFIG" "${overrides[@]}")
echo "+ (cd $REPO &&$(printf ' %q' "${cmd[@]}"))" >&2
[[ "${DRY_RUN:-0}" == 1 ]] && exit 0
exec "${cmd[@]}"
