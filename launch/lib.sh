# shellcheck shell=bash
# Helpers shared by launch/single_node.sh, launch/multi_node.sh, launch/resume_example.sh and
# launch/slurm.sbatch.
# Sourcing this file only defines functions: it sets no variables or shell options and runs nothing.
#
# The functions read these variables of the calling script: REPO (repo root, set by the caller),
# PYTHON (interpreter), CONFIG, CUDA_VISIBLE_DEVICES, DS_ACCELERATOR, LAUNCHER_ARGS and DRY_RUN.
# Results that are arrays come back in named globals (launcher, extra) as the callers used them before.

# Print the calling script's header comment (line 2 up to `set -euo pipefail`) as its usage text.
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# Print "SCRIPT: MESSAGE" to stderr and exit with status 2 (SCRIPT: the name of the running script).
die() { echo "${0##*/}: $*" >&2; exit 2; }

# Absolute path of FILE (its directory must exist).
abs_path() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

# require_config [--usage] [MESSAGE]: die with MESSAGE (default: how to pass CONFIG) unless CONFIG is set,
# printing the usage text to stderr first with --usage; die unless it names a file; make it absolute.
require_config() {
  local show_usage=0
  if [[ "${1:-}" == --usage ]]; then show_usage=1; shift; fi
  if [[ -z "${CONFIG:-}" ]]; then
    if ((show_usage)); then usage >&2; fi
    die "${1:-CONFIG is required (CONFIG=FILE or --config FILE)}"
  fi
  [[ -f "$CONFIG" ]] || die "config file not found: $CONFIG"
  CONFIG="$(abs_path "$CONFIG")"
}

# Die (status 2) if CUDA_VISIBLE_DEVICES is set and hides every GPU (empty, or Slurm's `NoDevFiles`), unless
# DS_ACCELERATOR=cpu: the GPUs nvidia-smi counts, or a launcher's own CUDA_VISIBLE_DEVICES=0..N-1, are not the
# user's to use.
check_gpus_shown() {
  [[ "${DS_ACCELERATOR:-}" != cpu && -n "${CUDA_VISIBLE_DEVICES+set}" ]] || return 0
  [[ -n "${CUDA_VISIBLE_DEVICES//[[:space:]]/}" && "$CUDA_VISIBLE_DEVICES" != NoDevFiles ]] ||
    die "CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' hides every GPU: unset it to use all of them, list GPU" \
        "indices (e.g. CUDA_VISIBLE_DEVICES=0,1), or set DS_ACCELERATOR=cpu to train on CPU processes"
}

# Number of devices on this node: the entries of CUDA_VISIBLE_DEVICES, else the GPUs nvidia-smi lists;
# 1 if there are none or DS_ACCELERATOR=cpu. Dies if CUDA_VISIBLE_DEVICES hides every GPU (check_gpus_shown).
count_devices() {
  if [[ "${DS_ACCELERATOR:-}" == cpu ]]; then
    echo 1
    return
  fi
  check_gpus_shown
  if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .
  elif command -v nvidia-smi >/dev/null 2>&1; then
    local n
    n="$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c . || true)"
    echo "$(( n > 0 ? n : 1 ))"
  else
    echo 1
  fi
}

# find_launcher OVERRIDE COMMAND MODULE: set the array `launcher` to the words of OVERRIDE (the user's
# DEEPSPEED / TORCHRUN) if it is set, else to COMMAND if that is on PATH, else to `$PYTHON -m MODULE`.
# shellcheck disable=SC2034  # launcher is the result, read by the caller
find_launcher() {
  if [[ -n "$1" ]]; then
    read -r -a launcher <<<"$1"
  elif command -v "$2" >/dev/null 2>&1; then
    launcher=("$2")
  else
    launcher=("$PYTHON" -m "$3")
  fi
}

# Set the array `extra` to the words of LAUNCHER_ARGS (empty if unset).
# shellcheck disable=SC2034  # extra is the result, read by the caller
read_launcher_args() {
  extra=()
  [[ -z "${LAUNCHER_ARGS:-}" ]] || read -r -a extra <<<"$LAUNCHER_ARGS"
}

# Make the repo root the working directory, where every launcher runs training (relative paths in a config
# resolve against it), after checking that PYTHON imports the installed xpt_ds package.
enter_repo() {
  "$PYTHON" -c "import xpt_ds" 2>/dev/null ||
    die "$PYTHON cannot import xpt_ds: install it first (bash launch/install.sh, or pip install PATH_TO_CHECKOUT)"
  cd "$REPO" || exit
}

# exec_in_repo COMMAND...: enter_repo, print the command to stderr, then exec it (with DRY_RUN=1: exit 0).
exec_in_repo() {
  enter_repo
  echo "+ (cd $REPO &&$(printf ' %q' "$@"))" >&2
  [[ "${DRY_RUN:-0}" == 1 ]] && exit 0
  exec "$@"
}
