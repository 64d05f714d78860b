#!/usr/bin/env bash
# Train on several nodes. Two ways to start the processes:
#
# A) hostfile + passwordless ssh (DeepSpeed's pdsh launcher): run ONCE, on the first host of the hostfile.
#      HOSTFILE=launch/hostfile CONFIG=run.yaml bash launch/multi_node.sh [overrides ...]
#    = deepspeed --hostfile $HOSTFILE --master_addr $MASTER_ADDR --master_port $MASTER_PORT \
#        --module xpt_ds.cli.train --config $CONFIG [overrides ...]
#    Format of the hostfile: launch/hostfile.example (`host slots=N`). The repo and the Python environment
#    must sit at the same paths on every node. pdsh carries only PYTHON*/NCCL* variables and the KEY=VALUE
#    lines of `.deepspeed_env` (repo root or $HOME): put e.g. DS_ACCELERATOR=cpu or NCCL_SOCKET_IFNAME there.
#
# B) one command per node, no ssh needed (torchrun, static rendezvous): run on EVERY node, same CONFIG.
#      NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 CONFIG=run.yaml bash launch/multi_node.sh   # on node0
#      NNODES=2 NODE_RANK=1 MASTER_ADDR=node0 CONFIG=run.yaml bash launch/multi_node.sh   # on node1
#    = torchrun --nnodes $NNODES --node_rank $NODE_RANK --nproc_per_node $NPROC_PER_NODE \
#        --master_addr $MASTER_ADDR --master_port $MASTER_PORT --rdzv_conf timeout=$RDZV_TIMEOUT \
#        -m xpt_ds.cli.train --config $CONFIG [overrides ...]
#
# Every value can also be given as a flag: --config, --hostfile, --master_addr, --master_port, --nnodes,
# --node_rank, --nproc_per_node, --mode (dashes or underscores). All other arguments (or everything after
# `--`) go to `python -m xpt_ds.cli.train` unchanged: config overrides (--section.key=value) or --resume TAG.
# Rerunning the same command resumes from the newest complete checkpoint (checkpoint.resume: auto).
#
# environment:
#   CONFIG          run config, required; relative paths inside it are relative to the repo root (the
#                   working directory of the run on every node); needs a filesystem shared by the nodes
#   MODE            deepspeed | torchrun; default: deepspeed if HOSTFILE is set, else torchrun
#   HOSTFILE        (A) DeepSpeed hostfile
#   MASTER_ADDR     (A) default: the first host in HOSTFILE; (B) required: address of the NODE_RANK=0 node
#   MASTER_PORT     default 29500; the same on every node
#   NUM_NODES, NUM_GPUS  (A) optional: use only that many hosts / GPUs per host of the hostfile
#   NNODES, NODE_RANK    (B) required
#   RDZV_TIMEOUT    (B) seconds a node waits for the others to join (torchrun's --rdzv_conf timeout); default 600
#   NPROC_PER_NODE  (B) processes per node; default: the visible GPUs (CUDA_VISIBLE_DEVICES, else
#                   nvidia-smi), 1 if none or DS_ACCELERATOR=cpu
#   STOP_GRACE_S    (B) seconds the node's ranks have to checkpoint after the first stop signal (or this script's
#                   death) before what is left is killed (default 1800)
#   DS_ACCELERATOR  `cpu` for CPU-only clusters (gloo/ccl instead of NCCL)
#   LAUNCHER_ARGS   extra launcher flags, space-separated (e.g. "--ssh_port 2222" or "--launcher openmpi" for A)
#   PYTHON (default python), DEEPSPEED (default deepspeed), TORCHRUN (default torchrun)
#   DRY_RUN=1       print the command instead of running it
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"

overrides=()
while (($#)); do
  opt="${1%%=*}"
  opt="${opt//-/_}"
  case "$opt" in
    __config|__hostfile|__master_addr|__master_port|__nnodes|__node_rank|__nproc_per_node|__mode)
      if [[ "$1" == *=* ]]; then val="${1#*=}"; shift
      else (($# >= 2)) || die "$1 needs a value"; val="$2"; shift 2; fi
      case "$opt" in
        __config) CONFIG="$val" ;;
        __hostfile) HOSTFILE="$val" ;;
        __master_addr) MASTER_ADDR="$val" ;;
        __master_port) MASTER_PORT="$val" ;;
        __nnodes) NNODES="$val" ;;
        __node_rank) NODE_RANK="$val" ;;
        __nproc_per_node) NPROC_PER_NODE="$val" ;;
        __mode) MODE="$val" ;;
      esac ;;
    _h|__help) usage; exit 0 ;;
    __) shift; overrides+=("$@"); break ;;
    *) overrides+=("$1"); shift ;;
  esac
done

require_config --usage
MASTER_PORT="${MASTER_PORT:-29500}"
[[ "$MASTER_PORT" =~ ^[0-9]+$ ]] || die "MASTER_PORT must be a port number, got '$MASTER_PORT'"

if [[ -z "${MODE:-}" ]]; then
  if [[ -n "${HOSTFILE:-}" ]]; then MODE=deepspeed; else MODE=torchrun; fi
fi

read_launcher_args

case "$MODE" in
  deepspeed)
    [[ -n "${HOSTFILE:-}" ]] || die "MODE=deepspeed needs HOSTFILE (see launch/hostfile.example)"
    [[ -f "$HOSTFILE" ]] || die "hostfile not found: $HOSTFILE"
    HOSTFILE="$(abs_path "$HOSTFILE")"
    hosts=()
    fewest=""  # the fewest slots of any host
    while read -r line || [[ -n "$line" ]]; do
      line="${line%%#*}"
      [[ -n "${line//[[:space:]]/}" ]] || continue
      [[ "$line" =~ ^[[:space:]]*([^[:space:]]+)[[:space:]]+slots=([1-9][0-9]*)[[:space:]]*$ ]] \
        || die "bad hostfile line in $HOSTFILE: '$line' (expected 'HOST slots=N', N >= 1)"
      for h in "${hosts[@]}"; do
        [[ "$h" != "${BASH_REMATCH[1]}" ]] ||
          die "hostfile $HOSTFILE lists ${BASH_REMATCH[1]} twice (one line per host)"
      done
      hosts+=("${BASH_REMATCH[1]}")
      slots="${BASH_REMATCH[2]}"
      [[ -n "$fewest" ]] && ((fewest <= slots)) || fewest=$slots
    done <"$HOSTFILE"
    ((${#hosts[@]} > 0)) || die "hostfile $HOSTFILE lists no hosts"
    if [[ -n "${NUM_GPUS:-}" ]]; then
      [[ "$NUM_GPUS" =~ ^[1-9][0-9]*$ ]] || die "NUM_GPUS must be a positive integer, got '$NUM_GPUS'"
      ((NUM_GPUS <= fewest)) || die "NUM_GPUS=$NUM_GPUS but a host in $HOSTFILE has only slots=$fewest"
    fi
    MASTER_ADDR="${MASTER_ADDR:-${hosts[0]}}"
    find_launcher "${DEEPSPEED:-}" deepspeed deepspeed.launcher.runner
    sizes=()
    [[ -z "${NUM_NODES:-}" ]] || sizes+=(--num_nodes "$NUM_NODES")
    [[ -z "${NUM_GPUS:-}" ]] || sizes+=(--num_gpus "$NUM_GPUS")
    cmd=("${launcher[@]}" --hostfile "$HOSTFILE" "${sizes[@]}" --master_addr "$MASTER_ADDR"
         --master_port "$MASTER_PORT" "${extra[@]}" --module xpt_ds.cli.train --config "$CONFIG" "${overrides[@]}")
    ;;
  torchrun)
    [[ -n "${NNODES:-}" && -n "${NODE_RANK:-}" && -n "${MASTER_ADDR:-}" ]] \
      || die "MODE=torchrun needs NNODES, NODE_RANK and MASTER_ADDR (or set HOSTFILE for the deepspeed launcher)"
    [[ "$NNODES" =~ ^[1-9][0-9]*$ ]] || die "NNODES must be a positive integer, got '$NNODES'"
    if ! [[ "$NODE_RANK" =~ ^[0-9]+$ ]] || ((NODE_RANK >= NNODES)); then
      die "NODE_RANK must be in 0..$((NNODES - 1)), got '$NODE_RANK'"
    fi
    NPROC_PER_NODE="${NPROC_PER_NODE:-$(count_devices)}"
    [[ "$NPROC_PER_NODE" =~ ^[1-9][0-9]*$ ]] || die "NPROC_PER_NODE must be a positive integer, got '$NPROC_PER_NODE'"
    RDZV_TIMEOUT="${RDZV_TIMEOUT:-600}"
    [[ "$RDZV_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "RDZV_TIMEOUT must be a positive number of seconds, got '$RDZV_TIMEOUT'"
    find_launcher "${TORCHRUN:-}" torchrun torch.distributed.run
    # under xpt_ds.runtime.launch_guard (this script's pid): a stop signal (USR1 too, which kills torchrun) goes to
    # the node's ranks, which checkpoint within STOP_GRACE_S (torchrun's default is 30 s), and a kill -9 of the
    # script stops them as a SIGTERM does (they trained on)
    cmd=("$PYTHON" -m xpt_ds.runtime.launch_guard --grace "${STOP_GRACE_S:-1800}" --
         "${launcher[@]}" --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$NPROC_PER_NODE"
         --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --rdzv_conf "timeout=$RDZV_TIMEOUT" "${extra[@]}"
         -m xpt_ds.cli.train --config "$CONFIG" "${overrides[@]}")
    # torchrun says nothing while it waits for the other nodes (a node whose master never started looked hung)
    echo "multi_node.sh: node $NODE_RANK of $NNODES waits up to ${RDZV_TIMEOUT}s for the rendezvous at" \
         "$MASTER_ADDR:$MASTER_PORT (every NODE_RANK 0..$((NNODES - 1)) must start, with the same MASTER_ADDR and" \
         "MASTER_PORT)" >&2
    ;;
  *) die "MODE must be deepspeed or torchrun, got '$MODE'" ;;
esac

exec_in_repo "${cmd[@]}"
