# shellcheck shell=bash
# The step runner shared by the scripts that run unattended on a lent GPU (benchmarks/gpu_session.sh,
# launch/gpu_uagec.sh, launch/gpu_decoder.sh) and the payload they read (launch/gpu_payload.sh,
# launch/gpu_decoder_payload.sh): each step's output goes to OUT/NAME.log and its exit code and seconds to OUT/steps.tsv
# the moment it ends, so a session cut short still says what finished. Sourcing this file only defines the
# functions; they read the caller's OUT and BUDGET_S.
#
# BUDGET_S (optional): the seconds the whole script may take, counted from its start (bash's SECONDS). A device
# call runs at most 10 minutes and a session has 15 minutes of device time in all, so a script that runs out of
# time must still leave its results packed: budget_step skips a step that would not fit, budget_run stops a
# command that overruns, and budget_left tells the script how much is left for the rest.

# step NAME COMMAND...: run COMMAND; its exit code is step's.
step() {
  local name=$1 t0=$SECONDS rc
  shift
  echo "[$(date +%T)] $name: $*" | tee -a "$OUT/session.log"
  "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$OUT/steps.tsv"
  return $rc
}

# pack_results FIND_ARGS...: OUT/results.tgz, whole or not at all (tmp + rename), of the files under OUT that
# `find . FIND_ARGS -print0` prints: the one file a device call brings back (it returns at most 8 from its $OUT).
pack_results() {
  (cd "$OUT" && find . "$@" -print0 | tar --null -czf results.tgz.tmp -T - && mv results.tgz.tmp results.tgz)
}

# pack_scores: pack_results of a study's results without its weights: every JSON, JSONL, Markdown, PNG, TSV,
# YAML, text and log file and TensorBoard event outside checkpoints/, export/ and model/ folders.
pack_scores() {
  pack_results \( -name checkpoints -o -name export -o -name model \) -prune -o -type f \
    \( -name '*.json' -o -name '*.jsonl' -o -name '*.md' -o -name '*.png' -o -name 'events.out.tfevents.*' \
       -o -name '*.log' -o -name '*.tsv' -o -name '*.yaml' -o -name '*.txt' \)
}

# unpack_payload MARKER: the payload whose slices the device calls left in PAYLOAD (part1/slice0, part2/slice1,
# ...), joined, checked against the payload.sha256 that came with part1 and unpacked into PAYLOAD/payload, unless
# PAYLOAD/payload/MARKER shows it was unpacked before (the machine keeps /tmp while it stays warm).
unpack_payload() {
  [ -e "$PAYLOAD/payload/$1" ] && return 0
  local want got
  want=$(cat "$PAYLOAD"/part1/payload.sha256 "$PAYLOAD"/payload.sha256 2>/dev/null | head -1)
  got=$(cat "$PAYLOAD"/part*/slice* | sha256sum | cut -d' ' -f1)
  [ -n "$want" ] && [ "$want" = "$got" ] || { echo "payload in $PAYLOAD: sha256 $got, expected '$want'" >&2; return 1; }
  cat "$PAYLOAD"/part*/slice* | tar -C "$PAYLOAD" -xzf -
}

# slice_payload STAGE DIR: STAGE/payload as one .tar.gz cut into slices of at most PART_MB MiB (default 56), in
# DIR/part1/slice0, DIR/part2/slice1, ..., and its sha256 in DIR/payload.sha256 and DIR/part1/ (a device call
# carries at most 64 MiB, the working tree included: one part a call, unpack_payload joins them). DIR is
# replaced, and git-ignored through .git/info/exclude.
slice_payload() {
  local stage=$1 dir=$2 n=0 slice
  rm -rf "$dir"
  mkdir -p "$dir"
  tar -C "$stage" -cf - payload | gzip -1 | split -b "${PART_MB:-56}m" -d -a 1 - "$stage/slice"
  for slice in "$stage"/slice*; do
    n=$((n + 1))
    mkdir -p "$dir/part$n"
    mv "$slice" "$dir/part$n/slice$((n - 1))"
  done
  cat "$dir"/part*/slice* | sha256sum | cut -d' ' -f1 >"$dir/payload.sha256"
  cp "$dir/payload.sha256" "$dir/part1/"
  [ -d .git/info ] && { grep -qxF "/$dir/" .git/info/exclude 2>/dev/null || echo "/$dir/" >>.git/info/exclude; }
  du -sh "$dir"/part* | sed 's/^/  /'
  echo "packed $n part(s) in $dir: carry one per call, part1 first, and .gpu-kit with the last"
}

# budget_left [RESERVE]: seconds of BUDGET_S left after RESERVE more (a large number without a budget).
budget_left() {
  if [ -z "${BUDGET_S:-}" ]; then echo 1000000; else echo $((BUDGET_S - SECONDS - ${1:-0})); fi
}

# budget_run COMMAND...: run COMMAND (a program, not a shell function) until the budget, less RESERVE_S seconds
# (default 0) kept for what the script does after it (packing), ends; then its whole process group gets SIGTERM
# (timeout's; exit 124). A trainer takes SIGTERM as preemption and checkpoints (a sweep passes it on to its runs'
# ranks and waits for them): what is left of the group gets GRACE_S seconds (default 15) to end, then SIGKILL (a
# sweep's runs, tethered to it, are killed with it), so nothing writes into OUT while it is packed. Exit 124 at
# once when nothing is left of the budget.
budget_run() {
  local left tpid rc i
  left=$(budget_left "${RESERVE_S:-0}")
  if [ -z "${BUDGET_S:-}" ]; then
    "$@"
    return
  fi
  if [ "$left" -le 0 ]; then  # (timeout 0 would mean no limit at all)
    echo "no time left in the budget for: $*" >&2
    return 124
  fi
  timeout "$left" "$@" &  # timeout leads a process group of its own: the command and all it starts
  tpid=$!
  wait "$tpid"
  rc=$?
  for ((i = 0; i < ${GRACE_S:-15}; i++)); do
    group_running "$tpid" || break
    sleep 1
  done
  kill -KILL -- "-$tpid" 2>/dev/null
  return $rc
}

# group_running PGID: a process of group PGID is still running (zombies, which an init process may reap only
# seconds later, do not count).
group_running() {
  if command -v ps >/dev/null; then
    ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ {found = 1} END {exit !found}'
  else
    kill -0 -- "-$1" 2>/dev/null
  fi
}

# budget_step NAME NEED COMMAND...: step NAME budget_run COMMAND, skipped when less than NEED seconds (its least
# worth starting) are left, or none at all: steps.tsv says "skip", and the script goes on (a later, shorter step
# may still fit).
budget_step() {
  local name=$1 need=$2 left
  shift 2
  left=$(budget_left "${RESERVE_S:-0}")
  if [ "$left" -lt "$need" ] || [ "$left" -le 0 ]; then
    echo "[$(date +%T)] $name: skipped: ${left} s of the budget left, it needs about ${need} s" | tee -a "$OUT/session.log"
    printf '%s\tskip\t0\n' "$name" | tee -a "$OUT/steps.tsv"
    return 0
  fi
  step "$name" budget_run "$@"
}

# session_args SCRIPT OUT [--payload DIR] [--rehearse | --pack | --dry-run]: a GPU study's arguments (launch/
# gpu_uagec.sh, launch/gpu_decoder.sh): OUT (made, absolute), PAYLOAD (where the device calls left the payload's
# slices, default /tmp/xpt_payload) and MODE (gpu, rehearse, pack or dry); a missing OUT or an unknown argument
# exits 2. Also PY, and the environment every step shares.
session_args() {
  local usage="usage: bash $1 OUT [--payload DIR] [--rehearse | --pack | --dry-run]"
  shift
  [ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
  OUT=$1
  shift
  PAYLOAD=/tmp/xpt_payload MODE=gpu
  while [ $# -gt 0 ]; do
    case $1 in
      --payload) PAYLOAD=${2:?--payload needs a directory}; shift 2 ;;
      --rehearse) MODE=rehearse; shift ;;
      --pack) MODE=pack; shift ;;
      --dry-run) MODE=dry; shift ;;
      *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
  done
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  PY=${PYTHON:-python3}
  export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
}

# pack_study MODULE: the study's reports and verdicts (python -m MODULE --out OUT; a failure is said and the rest
# still packs, its error in the log), then pack_scores.
pack_study() {
  "$PY" -m "$1" --out "$OUT" || echo "pack: the reports failed" >&2
  pack_scores
}

# dry_steps: a --dry-run's step runner: each step's output on stdout, labelled with its name; no budget, no log,
# no steps.tsv. WORK (the script's own files) becomes a temporary folder, removed at exit, so OUT stays untouched.
dry_steps() {
  # sed -u: a line a write of its own. The study's sweeps run at once, each through its own sed into one stdout,
  # and block-buffered seds cut each other's lines apart (the dry-run test failed twice so, 2026-12-05).
  step() { local name=$1; shift; "$@" 2>&1 | sed -u -e "/Setting accelerator to CPU/d" -e "s/^/$name: /"; }
  budget_run() { "$@"; }
  BUDGET_S=
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
}

# sweep_deadline: the study's start_for (seconds of BUDGET_S in which a run may still start: until RUN_S + PACK_S
# before its end; 1 without a budget) and DEADLINE (xpt-ds sweep's --deadline-minutes for that moment).
sweep_deadline() {
  DEADLINE=() start_for=1
  if [ -n "${BUDGET_S:-}" ]; then
    start_for=$(budget_left $((RUN_S + PACK_S)))
    DEADLINE=(--deadline-minutes "$("$PY" -m experiments.uagec.budget "$start_for" --decimals 2)")
  fi
}

# sweeps_then_pack: the study's run_sweeps if a run can still start (sweep_deadline), then, unless MODE is dry
# (which exits here), the study's pack as a step and OUT/DONE.
sweeps_then_pack() {
  if [ "$start_for" -le 0 ]; then
    echo "[$(date +%T)] sweeps: not started: $(budget_left) s of BUDGET_S left, a run needs RUN_S + PACK_S =" \
      "$((RUN_S + PACK_S))" | tee -a "$OUT/session.log"
  else
    run_sweeps
  fi
  [ "$MODE" = dry ] && exit 0
  step pack pack
  echo "[$(date +%T)] done: $OUT/results.tgz" | tee -a "$OUT/session.log"
  touch "$OUT/DONE"
}
