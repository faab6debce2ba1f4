#!/usr/bin/env bash
# The GPU data plane's switch in the MPI Runtime (option gpu, docs/gpu.md "Automatic use")
# under real mpirun jobs of mpi_dataplane (label mpi; also label gpu).
# Usage: run_gpu_runtime.sh MPIEXEC MPI_DATAPLANE MAKE_PHOTO_DATASET DATA_DIR CASE
# CASE:
#   auto_host  gpu=auto where no trainer sees a device: the host path end to end (exactly
#              once, reference checksums) and one log line naming why
#   on_fails   gpu=on where no trainer sees a device: every rank fails fast with the cause
#   device     gpu=on with a device: the same checks through the device path (skips, exit 77,
#              when no device is visible here)
set -uo pipefail
mpiexec=$1 prog=$2 makeset=$3 data=$4 case=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$data"
good=$data/photos-240.h5
[ -f "$good" ] || "$makeset" "$good" --images 240 --width 64 --height 48 || exit 1
log=$(mktemp /tmp/bc_mpi_gpu_XXXXXX)
trap 'rm -f "$log"' EXIT
common=(--dataset="$good" --image_size=32 --crop=random --flip --seed=7 --threads=1
        --job_id="mpitest-gpu-$case-$$" --heartbeat_ms=30s --epochs=2)

fail() { echo "FAIL $case: $*"; echo "--- output ---"; cat "$log"; exit 1; }
run() {  # run SECONDS RANKS ARGS...
  local secs=$1 n=$2
  shift 2
  echo "+ mpirun -n $n mpi_dataplane $*"
  timeout -k 5 "$secs" "$mpiexec" --oversubscribe --bind-to none -n "$n" "$prog" "$@" >"$log" 2>&1
  rc=$?
  [ "$rc" -eq 124 ] && fail "timed out after ${secs}s (a hang, not a fast failure)"
  return 0
}
device_visible() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; }

case "$case" in
  auto_host)
    device_visible && { echo "SKIP: a GPU is visible; auto would take the device path"; exit 77; }
    BATCHCAST_DEBUG=INFO BATCHCAST_DEBUG_SUBSYS=CUDA run 120 3 "${common[@]}" --bs=8,5 --gpu=auto \
      --name=gpu_auto
    [ "$rc" -eq 0 ] || fail "mpirun exited with $rc"
    grep -q "^PASS mpi_dataplane" "$log" || fail "no PASS line"
    n=$(grep -c "gpu: node 0: host path for every trainer: gpu=auto: host path (" "$log")
    [ "$n" -eq 1 ] || fail "expected one host-path line from the node leader, found $n"
    grep "gpu: node 0: host path" "$log"
    grep "PASS mpi_dataplane" "$log" ;;
  on_fails)
    device_visible && { echo "SKIP: a GPU is visible"; exit 77; }
    run 60 3 "${common[@]}" --bs=8,5 --gpu=on --name=gpu_on
    [ "$rc" -ne 0 ] || fail "the job succeeded but gpu=on without a device must fail"
    hits=$(grep -cE "rank [0-2]: runtime create failed: .*gpu=on, but (this trainer sees no GPU|batchcast was built without CUDA)" "$log")
    [ "$hits" -eq 3 ] || fail "expected the cause on all 3 ranks, found $hits"
    grep -m1 "runtime create failed: gpu=on" "$log" ;;
  device)
    device_visible || { echo "SKIP: no CUDA device visible"; exit 77; }
    # Batch 4 divides the producer batch: batches that span two cannot be device-mapped
    # (gpu=on refuses them; docs/gpu.md).
    BATCHCAST_DEBUG=INFO BATCHCAST_DEBUG_SUBSYS=CUDA run 180 3 "${common[@]}" --bs=8,4 --gpu=on \
      --name=gpu_device
    [ "$rc" -eq 0 ] || fail "mpirun exited with $rc"
    grep -q "^PASS mpi_dataplane" "$log" || fail "no PASS line"
    grep -q "gpu: node 0: device path" "$log" || fail "the device path was not taken"
    grep "gpu: node 0: device path" "$log" ;;
  *) echo "run_gpu_runtime.sh: unknown case '$case'" >&2; exit 2 ;;
esac
echo "PASS $case"
