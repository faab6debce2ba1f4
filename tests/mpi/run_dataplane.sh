#!/usr/bin/env bash
# The node data plane under real `mpirun --oversubscribe -n K` jobs (label mpi).
# Usage: run_dataplane.sh MPIEXEC MPI_DATAPLANE MAKE_PHOTO_DATASET DATA_DIR CASE
# CASE: eo_1 eo_2 eo_4 eo_8 early_detach backpressure killed_consumer corrupt_jpeg
#       idle_cpu leader_only missing_dataset
# Every case also checks that no /dev/shm entry containing "batchcast" appeared.
set -uo pipefail
mpiexec=$1 prog=$2 makeset=$3 data=$4 case=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$data"
good=$data/photos-240.h5 bad=$data/photos-corrupt37.h5
# Atomic writes (DatasetWriter renames a finished file), so concurrent tests may race here.
[ -f "$good" ] || "$makeset" "$good" --images 240 --width 64 --height 48 || exit 1
log=$(mktemp /tmp/bc_mpi_dataplane_XXXXXX)
trap 'rm -f "$log"' EXIT
shm_before=$(ls /dev/shm 2>/dev/null | grep batchcast | sort)
job="mpitest-$case-$$"
common=(--dataset="$good" --image_size=32 --crop=random --flip --seed=7 --threads=1
        --job_id="$job" --heartbeat_ms=30s)

fail() { echo "FAIL $case: $*"; echo "--- output ---"; cat "$log"; exit 1; }

# run SECONDS RANKS ARGS...: mpirun under a timeout; output in $log, status in $rc.
run() {
  local secs=$1 n=$2
  shift 2
  echo "+ mpirun -n $n mpi_dataplane $*"
  local start=$SECONDS
  timeout -k 5 "$secs" "$mpiexec" --oversubscribe --bind-to none -n "$n" "$prog" "$@" >"$log" 2>&1
  rc=$?
  # 124: timeout's TERM; a 137 after the limit: its KILL (mpirun's own 137 = a rank's SIGKILL).
  if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ $((SECONDS - start)) -ge "$secs" ]; }; then
    fail "timed out after ${secs}s (a hang, not a fast failure)"
  fi
  echo "mpirun exited with $rc after $((SECONDS - start)) s"
  return 0
}

expect_pass() {
  [ "$rc" -eq 0 ] || fail "mpirun exited with $rc"
  grep -q "^PASS mpi_dataplane" "$log" || fail "no PASS line"
  cat "$log"
}

expect_fail() {  # expect_fail REGEX [COUNT]: nonzero exit and REGEX in the output (COUNT times)
  [ "$rc" -ne 0 ] || fail "the job succeeded but should have failed"
  local hits
  hits=$(grep -cE "$1" "$log")
  [ "$hits" -ge "${2:-1}" ] || fail "expected ${2:-1} line(s) matching '$1', found $hits"
  grep -E "$1" "$log" | head -n "${2:-1}"
}

case "$case" in
  eo_1) run 120 2 "${common[@]}" --epochs=3 --name=eo_1 --bs=8 --jitter-us=400 && expect_pass ;;
  eo_2) run 120 3 "${common[@]}" --epochs=3 --carve_offset --name=eo_2 --bs=8,13 \
          --jitter-us=400 && expect_pass ;;
  eo_4) run 150 5 "${common[@]}" --epochs=2 --carve_offset --carve_shuffle --normalize \
          --name=eo_4 --bs=16,7,5,12 --jitter-us=400 && expect_pass ;;
  eo_8) run 200 9 "${common[@]}" --epochs=3 --carve_shuffle --name=eo_8 \
          --bs=16,7,12,5,13,3,24,10 --jitter-us=300 && expect_pass ;;
  early_detach)
    run 120 4 "${common[@]}" --epochs=3 --name=early_detach --bs=8,8,12 --epochs-of=2:1 \
      --jitter-us=300 && expect_pass ;;
  backpressure)  # rank 3 is 10x slower; the leader may not run more than ring_slots ahead
    run 150 4 "${common[@]}" --epochs=3 --ring_slots=3 --name=backpressure --bs=8 \
      --step-us=1000 --slow-rank=3 --slow-factor=10 --backpressure && expect_pass ;;
  killed_consumer)  # rank 2 kills itself mid-epoch: fail fast, naming it
    run 60 4 "${common[@]}" --epochs=3 --name=killed --bs=8 --step-us=2000 \
      --kill-rank=2 --kill-after=5
    # The leader's report names the cause (it said "leader: aborted", the cause only in a log
    # line of the ring).
    expect_fail "leader of node 0 \(rank 0\) failed: leader: aborted: consumer [0-9]+ \(rank 2, pid [0-9]+\) died or stopped responding" ;;
  corrupt_jpeg)  # sample 37 is a truncated JPEG and on_bad_sample=error
    [ -f "$bad" ] || "$makeset" "$bad" --images 240 --width 64 --height 48 --corrupt-index 37 \
      || exit 1
    run 60 3 "${common[@]}" --dataset="$bad" --shuffle=false --on_bad_sample=error --epochs=1 \
      --name=corrupt --bs=8
    expect_fail "leader of node 0 \(rank 0\) failed: .*sample 37 of $bad.*jpeg decode failed"
    # The leader reports its cause once (it was printed twice: a log line and the report).
    n=$(grep -c "leader of node 0 (rank 0)" "$log")
    [ "$n" -eq 1 ] || fail "the leader's failure was reported $n times, expected once"
    # The consumers see the same message unless MPI_Abort reaches them first.
    echo "consumers that reported it: $(grep -cE "rank [12]: next batch failed: .*sample 37 of $bad" "$log")"
    ;;
  idle_cpu)  # rank 1 holds a batch for 1 s, stalling the stream; rank 2 waits in Next()
    run 120 3 "${common[@]}" --epochs=1 --ring_slots=3 --name=idle_cpu --bs=8 \
      --hold-rank=1 --hold-at=2 --hold-ms=1000 --probe-rank=2 && expect_pass ;;
  leader_only)
    run 60 1 "${common[@]}" --name=leader_only
    expect_fail "runtime create failed: node 0 has only its leader rank \(rank 0\)" ;;
  missing_dataset)
    run 60 3 "${common[@]}" --dataset=/nonexistent/batchcast-missing.h5 --name=missing
    expect_fail "rank [0-2]: runtime create failed: .*/nonexistent/batchcast-missing.h5" 3 ;;
  *) echo "run_dataplane.sh: unknown case '$case'" >&2; exit 2 ;;
esac

shm_after=$(ls /dev/shm 2>/dev/null | grep batchcast | sort)
leaked=$(comm -13 <(echo "$shm_before") <(echo "$shm_after") | grep -v '^$')
[ -z "$leaked" ] || fail "leaked /dev/shm entries: $leaked"
ls /dev/shm | grep -q "$job" && fail "a /dev/shm entry carries this job's id $job"
echo "PASS $case (no /dev/shm entry left)"
