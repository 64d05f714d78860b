#!/usr/bin/env bash
# Install Slurm and munge (Debian's slurm-wlm, munge) for tests/launch/test_slurm.py, which runs a throwaway
# single-host cluster. Does nothing when they are already there; never fails: without root or apt-get
# the Slurm test skips and says why.
set -uo pipefail
have() { command -v "$1" >/dev/null 2>&1; }
have sbatch && have slurmctld && have slurmd && have munged && exit 0
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "tests/slurm/install.sh: not root or no apt-get: Slurm not installed, tests/launch/test_slurm.py will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null; }; then
  echo "tests/slurm/install.sh: apt-get install slurm-wlm munge failed: tests/launch/test_slurm.py will skip" >&2
fi
exit 0
