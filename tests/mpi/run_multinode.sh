#!/usr/bin/env bash
# Shard and replicate mode across virtual nodes (ranks_per_node) under one real
# `mpirun --oversubscribe` (label mpi). Usage:
#   run_multinode.sh MPIEXEC MPI_MULTINODE MAKE_PHOTO_DATASET DATA_DIR CASE
# CASE: shard_2 shard_3 replicate_2 replicate_3 shard_unequal_b thread_single
# Layouts (leader = first rank of each virtual node; the others train):
#   2 nodes: -n 7, ranks_per_node=4 -> 3 + 2 trainers;  3 nodes: -n 8, ranks_per_node=3 -> 2+2+1.
set -uo pipefail
mpiexec=$1 prog=$2 makeset=$3 data=$4 case=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$data"
good=$data/photos-240.h5
[ -f "$good" ] || "$makeset" "$good" --images 240 --width 64 --height 48 || exit 1
log=$(mktemp /tmp/bc_mpi_multinode_XXXXXX)
trap 'rm -f "$log"' EXIT
job="mpimulti-$case-$$"
# 229 samples: the last global / producer batch of every epoch is partial.
common=(--dataset="$good" --image_size=32 --crop=random --flip --seed=11 --threads=1
        --limit_samples=229 --epochs=2 --batch_size=8 --job_id="$job" --heartbeat_ms=30s)

fail() { echo "FAIL $case: $*"; echo "--- output ---"; cat "$log"; exit 1; }
run() {  # run SECONDS MPIRUN-ARGS...: output in $log, status in $rc
  local secs=$1
  shift
  echo "+ mpirun $*"
  local start=$SECONDS
  timeout -k 5 "$secs" "$mpiexec" --oversubscribe --bind-to none "$@" >"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ $((SECONDS - start)) -ge "$secs" ]; }; then
    fail "timed out after ${secs}s (a hang, not a fast failure)"
  fi
  echo "mpirun exited with $rc after $((SECONDS - start)) s"
}
expect_pass() {
  [ "$rc" -eq 0 ] || fail "mpirun exited with $rc"
  grep -q "^PASS mpi_multinode" "$log" || fail "no PASS line"
  cat "$log"
}
expect_fail() {
  [ "$rc" -ne 0 ] || fail "the job succeeded but should have failed"
  grep -qE "$1" "$log" || fail "expected a line matching '$1'"
  grep -E "$1" "$log" | head -n 1
}

case "$case" in
  shard_2) run 150 -n 7 "$prog" "${common[@]}" --mode=shard --ranks_per_node=4 && expect_pass ;;
  shard_3) run 150 -n 8 "$prog" "${common[@]}" --mode=shard --ranks_per_node=3 && expect_pass ;;
  replicate_2)
    run 150 -n 7 "$prog" "${common[@]}" --mode=replicate --producer_batch=24 --ranks_per_node=4 \
      && expect_pass ;;
  replicate_3)
    run 150 -n 8 "$prog" "${common[@]}" --mode=replicate --producer_batch=24 --ranks_per_node=3 \
      && expect_pass ;;
  shard_unequal_b)
    run 60 -n 4 "$prog" "${common[@]}" --mode=shard --ranks_per_node=2 : \
      -n 3 "$prog" "${common[@]}" --mode=shard --ranks_per_node=2 --batch_size=6
    expect_fail "runtime create failed: shard mode needs the same batch_size on every trainer" ;;
  thread_single)
    MULTINODE_TEST_THREAD_LEVEL=single run 60 -x MULTINODE_TEST_THREAD_LEVEL -n 6 "$prog" \
      "${common[@]}" --mode=replicate --ranks_per_node=3
    expect_fail "runtime create failed: replicate mode across 2 nodes .* needs MPI_THREAD_MULTIPLE" ;;
  *) echo "run_multinode.sh: unknown case '$case'" >&2; exit 2 ;;
esac
ls /dev/shm | grep -q "$job" && fail "a /dev/shm entry carries this job's id $job"
echo "PASS $case"
