#!/usr/bin/env bash
# Installs the Debian packages the Slurm tests need (a real slurmctld + slurmd + munge on this
# machine; tests/slurm/). Idempotent: does not touch apt when everything is present.
set -euo pipefail
PACKAGES=(slurmctld slurmd slurm-client munge iproute2 util-linux procps)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "slurm_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "slurm_deps: installing ${missing[*]}"
log=$(mktemp /tmp/batchcast-slurm-apt.XXXXXX.log)
# A concurrent apt run holds the lock: wait for it (bounded) instead of failing.
for _ in $(seq 1 3); do
  if { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
       $SUDO apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}"; } >"$log" 2>&1; then
    echo "slurm_deps: done"
    exit 0
  fi
done
tail -n 30 "$log"
echo "slurm_deps: apt-get install failed (full log: $log)"
exit 1
