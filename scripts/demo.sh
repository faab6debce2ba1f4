#!/usr/bin/env bash
# The Batchcast demo (`make demo`, docs/demo.md): a 4-trial learning-rate sweep of LibTorch CNNs
# on Fashion-MNIST, first with one leader decoding for all four trainers (sharing ON), then with
# every trainer running its own pipeline (sharing OFF, same total decode threads), and a
# side-by-side table of wall time, CPU-seconds, CPU per sample and memory.
# Usage: scripts/demo.sh [BUILD_DIR] [extra sweep_trainer flags / batchcast options...]
# Knobs (environment): DEMO_TRAINERS=4 DEMO_LRS=0.01,0.03,0.1,0.3 DEMO_EPOCHS=1 DEMO_THREADS=4
#   DEMO_LIMIT=0 (train samples, 0 = all 60000) DEMO_BATCH=64 DEMO_ENCODING=png|raw
#   DEMO_DATA=<repo>/data DEMO_OUT=BUILD_DIR/demo DEMO_MODES="on off" DEMO_TEST_LIMIT=0
#   DEMO_SIZE=28 (training image size)
# Progressive resizing: RESIZE='resize(...)' (or BATCHCAST_RESIZE; `make demo RESIZE=...`)
#   runs the same sweep under that schedule (docs/progressive-resizing.md); DEMO_EPOCHS then
#   defaults to 4 and DEMO_SIZE to the schedule's largest size. The plan, each epoch's sizes,
#   batch sizes and LR factors are printed in the telemetry summary and the report.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}; shift || true
case $build in /*) ;; *) build=$here/$build ;; esac
bin=$build/bin
if [ ! -x "$bin/sweep_trainer" ]; then
  echo "demo.sh: $bin/sweep_trainer is missing; it needs LibTorch (apt-get install libtorch-dev," \
       "then reconfigure $build with -DBATCHCAST_TORCH=ON and build)" >&2
  exit 1
fi
data=${DEMO_DATA:-$here/data}
out=${DEMO_OUT:-$build/demo}
trainers=${DEMO_TRAINERS:-4}
mkdir -p "$out"
bash "$here/scripts/fashion_mnist.sh" "$data" "$bin/batchcast"
case ${DEMO_ENCODING:-png} in
  png) train=$data/fashion-mnist-train-png.h5 ;;
  raw) train=$data/fashion-mnist-train.h5 ;;
  *) echo "demo.sh: DEMO_ENCODING=${DEMO_ENCODING} is not png or raw" >&2; exit 1 ;;
esac

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
resize=${RESIZE:-${BATCHCAST_RESIZE:-}}
unset BATCHCAST_RESIZE  # passed as a flag below, so every rank and mode sees the same spec
epochs=${DEMO_EPOCHS:-1}
size=${DEMO_SIZE:-28}
resize_flags=()
if [ -n "$resize" ]; then
  epochs=${DEMO_EPOCHS:-4}
  # The schedule's largest bucket is the full size (sizes=a:b:c or max=N).
  full=$(/usr/bin/python3 -c 'import re, sys
s = sys.argv[1]
m = re.search(r"sizes\s*=\s*([0-9: ]+)", s) or re.search(r"max\s*=\s*([0-9]+)", s)
print(m.group(1).split(":")[-1].strip() if m else "")' "$resize")
  size=${DEMO_SIZE:-${full:-28}}
  resize_flags=(--resize="$resize")
  echo "demo.sh: progressive resizing $resize, $epochs epochs, full size $size"
fi
flags=(--dataset="$train" --test-dataset="$data/fashion-mnist-test.h5"
       --lrs="${DEMO_LRS:-0.01,0.03,0.1,0.3}" --epochs="$epochs"
       --limit-samples="${DEMO_LIMIT:-0}" --batch-size="${DEMO_BATCH:-64}"
       --threads="${DEMO_THREADS:-4}" --channels=1 --image-size="$size"
       --crop=random --crop-scale-min=0.6 --flip=true --seed=1
       --test-limit="${DEMO_TEST_LIMIT:-0}" "${resize_flags[@]}")

run() {  # mode ranks
  local mode=$1 ranks=$2 t0 t1
  shift 2
  t0=$(date +%s.%N)
  mpirun --oversubscribe -n "$ranks" "$bin/sweep_trainer" "${flags[@]}" --sharing="$mode" \
    --results="$out/sharing-$mode.json" "$@"
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "mpirun wall (including MPI start-up): %.1f s\n", b - a }'
}
modes=${DEMO_MODES:-on off}
for m in $modes; do
  rm -f "$out/sharing-$m.json"
  if [ "$m" = on ]; then
    # Rank-level telemetry for the shared run: summary + diagnosis printed at the end, all
    # ranks' series in one HDF5 file, a Perfetto trace, and the report rendered below.
    rm -f "$out/telemetry.h5"
    run on $((trainers + 1)) \
      --telemetry="telemetry(hdf5=$out/telemetry.h5,csv=$out/telemetry.csv,trace=$out/trace.json,interval=1s)" "$@"
  else
    run off "$trainers" "$@"
  fi
done
if [ -s "$out/telemetry.h5" ]; then
  "$bin/batchcast" report "$out/telemetry.h5" --out "$out/report" &&
    echo "telemetry report: $out/report/report.html (trace: $out/trace.json, open in Perfetto)"
fi
[ -s "$out/sharing-on.json" ] && [ -s "$out/sharing-off.json" ] || exit 0

/usr/bin/python3 - "$out/sharing-on.json" "$out/sharing-off.json" <<'PY'
import json, sys
on, off = (json.load(open(p)) for p in sys.argv[1:3])
def agg(j): return sum(t["samples"] for t in j["trainers"]) / max(t["train_s"] for t in j["trainers"])
def acc(j): return sum(t["test_acc"] for t in j["trainers"]) / len(j["trainers"])
rows = [("ranks", "ranks", "{:.0f}"), ("wall (s)", "wall_s", "{:.1f}"), ("total CPU (s)", "cpu_s", "{:.1f}"),
        ("CPU per sample (us)", None, "{:.1f}"), ("data-pipeline CPU (s)", "data_cpu_s", "{:.1f}"),
        ("data-pipeline CPU per sample (us)", None, "{:.1f}"), ("aggregate samples/s", None, "{:.0f}"),
        ("peak RSS, sum of ranks (MiB)", "maxrss_sum_mib", "{:.0f}"),
        ("peak RSS, largest rank (MiB)", "maxrss_max_mib", "{:.0f}"),
        ("PSS at end, sum (MiB)", "pss_sum_mib", "{:.0f}"), ("decode threads", "decode_threads_total", "{:.0f}"),
        ("mean test accuracy (%)", None, "{:.2f}")]
def val(j, name, key):
    if key: return j[key]
    if name.startswith("CPU per"): return 1e6 * j["cpu_s_per_sample"]
    if name.startswith("data-pipeline CPU per"): return 1e6 * j["data_cpu_s_per_sample"]
    if name.startswith("aggregate"): return agg(j)
    return 100 * acc(j)
print("\n== side by side: sharing ON (1 leader decodes once) vs OFF (each trainer decodes)")
print(f"{'':36} {'sharing ON':>12} {'sharing OFF':>12} {'ON/OFF':>8}")
for name, key, f in rows:
    a, b = val(on, name, key), val(off, name, key)
    print(f"{name:36} {f.format(a):>12} {f.format(b):>12} {(a / b if b else 0):>8.2f}")
PY
