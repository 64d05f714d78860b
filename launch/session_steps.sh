# shellcheck shell=bash
# The step runner shared by the scripts that run unattended on a lent GPU (benchmarks/gpu_session.sh,
# launch/gpu_uagec.sh): each step's output goes to OUT/NAME.log and its exit code and seconds to OUT/steps.tsv
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

# budget_left [RESERVE]: seconds of BUDGET_S left after RESERVE more (a large number without a budget).
budget_left() {
  if [ -z "${BUDGET_S:-}" ]; then echo 1000000; else echo $((BUDGET_S - SECONDS - ${1:-0})); fi
}

# budget_run COMMAND...: run COMMAND (a program, not a shell function) until the budget, less RESERVE_S seconds
# (default 0) kept for what the script does after it (packing), ends; then its whole process group gets SIGTERM
# (timeout's; exit 124). A trainer takes SIGTERM as preemption and checkpoints, and may outlive the command that
# started it (a sweep dies at once): what is left of the group gets GRACE_S seconds (default 15) to end, then
# SIGKILL, so nothing writes into OUT while it is packed. Exit 124 at once when nothing is left of the budget.
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
