#!/usr/bin/env bash
# Train on one node with N processes through the DeepSpeed launcher (`deepspeed --module xpt_ds.cli.train`).
#
# usage:
#   CONFIG=run.yaml [NUM_GPUS=N] [MASTER_PORT=P] bash launch/single_node.sh [--section.key=value ...] [--resume TAG]
#   bash launch/single_node.sh --config run.yaml [--num_gpus N] [--master_port P] [--] [overrides ...]
#
# Every argument that is not one of the flags above is handed to `python -m xpt_ds.cli.train` unchanged
# (config overrides such as --optim.micro_batch_size=4, or --resume TAG). Rerunning the same command
# resumes from the newest complete checkpoint in RUN_DIR/checkpoints (checkpoint.resume: auto).
#
# environment:
#   CONFIG          run config (YAML/JSON), required; relative paths inside it are relative to the repo root,
#                   which is the working directory of the run
#   NUM_GPUS        processes to start; default: every visible GPU (CUDA_VISIBLE_DEVICES, else nvidia-smi),
#                   1 if there is none. With CUDA_VISIBLE_DEVICES=2,3 the run uses exactly GPUs 2 and 3.
#                   CUDA_VISIBLE_DEVICES must hold GPU indices: UUIDs or MIG ids (which the deepspeed launcher
#                   would replace with 0..N-1) and a value that hides every GPU (empty, NoDevFiles) are refused.
#   MASTER_PORT     rendezvous port on 127.0.0.1; default: a free port
#   DS_ACCELERATOR  `cpu` for CPU-only training (NUM_GPUS is then the number of CPU processes, default 1)
#   LAUNCHER_ARGS   extra `deepspeed` launcher flags, space-separated (e.g. "--bind_cores_to_rank")
#   PYTHON          interpreter (default: python); DEEPSPEED: launcher (default: deepspeed on PATH, else
#                   `$PYTHON -m deepspeed.launcher.runner`)
#   STOP_GRACE_S    seconds the ranks have to checkpoint after the first stop signal (or this script's death)
#                   before what is left of the job is killed (default 1800)
#   DRY_RUN=1       print the command instead of running it
#
# example (CPU): DS_ACCELERATOR=cpu NUM_GPUS=2 CONFIG=launch/configs/demo.yaml bash launch/single_node.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

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

require_config --usage

# The GPUs CUDA_VISIBLE_DEVICES selects, which must be a comma-separated list of indices: the deepspeed launcher sets
# each rank's CUDA_VISIBLE_DEVICES to indices of its own (0..N-1 without --include), so a selection by UUID or MIG
# id, or one that hides every GPU, would run on GPUs the user did not pick (another job's, on a shared node).
visible=""
if [[ "${DS_ACCELERATOR:-}" != cpu && -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
  check_gpus_shown
  [[ "$CUDA_VISIBLE_DEVICES" =~ ^[0-9]+(,[0-9]+)*$ ]] ||
    die "CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' is not a list of GPU indices, and the deepspeed launcher" \
        "would run on GPUs 0..N-1 instead: give the GPUs' indices (e.g. CUDA_VISIBLE_DEVICES=2,3; nvidia-smi -L" \
        "pairs them with UUIDs), or launch with NNODES=1 NODE_RANK=0 MASTER_ADDR=127.0.0.1 bash launch/multi_node.sh" \
        "(torchrun keeps CUDA_VISIBLE_DEVICES as it is)"
  visible="$CUDA_VISIBLE_DEVICES"
fi

NUM_GPUS="${NUM_GPUS:-$(count_devices)}"
[[ "$NUM_GPUS" =~ ^[1-9][0-9]*$ ]] || die "NUM_GPUS must be a positive integer, got '$NUM_GPUS'"

if [[ -z "${MASTER_PORT:-}" ]]; then
  # outside the kernel's ephemeral range, which other jobs' sockets draw from (xpt_ds/runtime/ports.py)
  MASTER_PORT="$("$PYTHON" -c 'from xpt_ds.runtime.ports import free_port; print(free_port())' 2>/dev/null)" ||
    die "$PYTHON cannot import xpt_ds: install it first (bash launch/install.sh, or pip install PATH_TO_CHECKOUT)"
fi
[[ "$MASTER_PORT" =~ ^[0-9]+$ ]] || die "MASTER_PORT must be a port number, got '$MASTER_PORT'"
# something listening there already (another job's rendezvous) would be a DistNetworkError traceback per rank
in_use="MASTER_PORT=$MASTER_PORT is in use on this machine; pick another or leave it unset"
"$PYTHON" - "$MASTER_PORT" <<'PY' 2>/dev/null || die "$in_use"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
PY

find_launcher "${DEEPSPEED:-}" deepspeed deepspeed.launcher.runner
read_launcher_args

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

# The deepspeed runner dies of a SIGTERM on one node and its launch.py of a SIGUSR1, leaving the ranks behind: the
# launcher runs under xpt_ds.runtime.launch_guard (this script's pid), which passes each stop signal to the ranks
# and stops them as for a SIGTERM if it is killed itself (kill -9 included).
exec_in_repo "$PYTHON" -m xpt_ds.runtime.launch_guard --grace "${STOP_GRACE_S:-1800}" -- \
  "${launcher[@]}" "${devices[@]}" --master_port "$MASTER_PORT" "${extra[@]}" \
  --module xpt_ds.cli.train --config "$CONFIG" "${overrides[@]}"
