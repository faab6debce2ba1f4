#!/usr/bin/env bash
# Runs telemetry_gather on N ranks and checks the gathered HDF5/CSV/JSON with h5py.
# Usage: run_telemetry_gather.sh MPIEXEC PROGRAM CHECK_SCRIPT N
set -euo pipefail
mpiexec=$1 prog=$2 check=$3 n=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d /tmp/bc_telem_mpi_XXXXXX)
trap 'rm -rf "$out"' EXIT
"$mpiexec" --oversubscribe -n "$n" "$prog" "$out"
roles=leader batches=$((10 * n))
for ((r = 1; r < n; r++)); do roles+=,consumer; batches+=,$((10 * (r + 1))); done
/usr/bin/python3 "$check" "$out/run.h5" --ranks "$n" --roles "$roles" --batches "$batches" \
  --experiment mpi-exp --workload mpi-wl --run mpi-run --csv "$out/run.csv" --json "$out/run.json"
/usr/bin/python3 -c "import json,sys; d=json.load(open('$out/run.trace.json')); \
pids={e['pid'] for e in d['traceEvents'] if e['ph']=='X'}; sys.exit(0 if len(pids)==$n else 1)"
