# shellcheck shell=bash
# The step runner shared by the scripts that run unattended on a lent GPU (benchmarks/gpu_session.sh,
# launch/gpu_uagec.sh): each step's output goes to OUT/NAME.log and its exit code and seconds to OUT/steps.tsv
# the moment it ends, so a session cut short still says what finished. Sourcing this file only defines the
# function; it reads the caller's OUT.

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
