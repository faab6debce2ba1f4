#!/usr/bin/env bash
# Runs one benchmark: benchmarks/run.sh BUILD_DIR NAME [extra arguments for the benchmark]
set -euo pipefail
build=${1:?usage: benchmarks/run.sh BUILD_DIR NAME [ARGS...]}
name=${2:?usage: benchmarks/run.sh BUILD_DIR NAME [ARGS...]}
shift 2
bin="$build/benchmarks/bench_$name"
# Builds the targets a benchmark runs: a tree that `make test` configured leaves the benchmarks
# that no test runs out of `all` (BATCHCAST_BENCHMARKS_IN_ALL=OFF), and bench_stage (a slow
# LibTorch translation unit) is never in it.
build_targets() {
  local log
  log=$(cmake --build "$build" --target "$@" 2>&1) || {
    echo "$log" | tail -n 30 >&2
    echo "bench: building $* in $build failed (above)" >&2; exit 2; }
}
if [ "$name" = python ]; then
  # The Python bindings against the C++ consumer (needs _batchcast and bench_python_consumer).
  build_targets bench_python_consumer _batchcast
  exec /usr/bin/python3 "$(dirname "$0")/bench_python.py" --build "$build" "$@"
fi
if [ "$name" = multimodel ]; then
  # train-many: one process with three models vs one process per model (needs LibTorch).
  exec /usr/bin/python3 "$(dirname "$0")/bench_multimodel.py" --build "$build" "$@"
fi
if [ "$name" = telemetry ]; then
  # The fan-out benchmark with telemetry off and on, side by side.
  exec "$build/benchmarks/bench_fanout" --cache "$build/benchmarks/fanout_set" --compare-telemetry 1 "$@"
fi
known=$(cd "$(dirname "$0")" && ls bench_*.cc 2>/dev/null | sed 's/^bench_//; s/\.cc$//' | tr '\n' ' ')
if [ ! -f "$(dirname "$0")/bench_$name.cc" ]; then
  echo "bench: unknown benchmark '$name' (known: ${known:-none})" >&2
  exit 2
fi
if [ "$name" = stage ] && ! cmake --build "$build" --target help 2>/dev/null | grep -x '\.\.\. bench_stage' >/dev/null; then
  echo "bench: bench_stage needs a build with LibTorch (-DBATCHCAST_TORCH=ON)" >&2; exit 2
fi
build_targets "bench_$name"
case "$name" in
  decode)
    # A real-photo JPEG set built once and cached in the build directory.
    exec "$bin" --cache "$build/benchmarks/decode_set" "$@" ;;
  resize)
    # The real-photo JPEG set as an ImageFolder, converted (with and without --buckets) by
    # the batchcast CLI of this build; cached in the build directory.
    exec "$bin" --cache "$build/benchmarks/resize_set" --cli "$build/bin/batchcast" "$@" ;;
  multinode)
    # Replicate mode over 2 and 3 virtual nodes: the benchmark runs mpirun of itself; the
    # real-photo JPEG set (500x375, q90) is built once and cached in the build directory.
    exec "$bin" --cache "$build/benchmarks/multinode_set" --mpirun "$(command -v mpirun)" "$@" ;;
  views)
    # Three views from one decode vs one leader per view, on the decode benchmark's real-photo
    # JPEG set (500x375, q90; built once by bench_decode --make-set when missing).
    "$build/benchmarks/bench_decode" --cache "$build/benchmarks/decode_set" --make-set
    exec "$bin" --set "$build/benchmarks/decode_set/500x375_q90_n300" "$@" ;;
  profile)
    # The decoded-sample cache on the decode benchmark's real-photo JPEG set (built by one
    # quick bench_decode run when missing).
    set="$build/benchmarks/decode_set/500x375_q90_n300"
    if [ ! -f "$set/complete" ]; then
      "$build/benchmarks/bench_decode" --cache "$build/benchmarks/decode_set" --reps 1 > /dev/null
    fi
    "$bin" --set "$set" "$@"
    # The strategy profiler (docs/profiler.md) on the same photos as an ImageFolder and on
    # Fashion-MNIST (PNG), then its recommendation per weights and cache setting.
    exec bash "$(dirname "$0")/bench_profile_strategies.sh" "$build" "$set" ;;
  stage)
    # The scripted encoder is made once (python3-torch) and cached in the build directory.
    exec "$bin" --cache "$build/benchmarks/stage_set" "$@" ;;
  read)
    # The read path alone (issue 33): the real-photo set (500x375 JPEG q90, built once and
    # cached) and Fashion-MNIST raw (gzip) and PNG (scripts/fashion_mnist.sh); the encoded
    # sets also as a layout version 1 copy, side by side. One table and JSON line per set.
    sets="$build/benchmarks/read_set"
    fm="$build/benchmarks/fmnist"
    "$bin" --photo-set "$sets" --cache "$sets" --compare-v1 "$@"
    bash "$(dirname "$0")/../scripts/fashion_mnist.sh" "$fm" "$build/bin/batchcast" >/dev/null
    "$bin" --dataset "$fm/fashion-mnist-train.h5" "$@"
    exec "$bin" --dataset "$fm/fashion-mnist-train-png.h5" --cache "$sets" --compare-v1 "$@" ;;
  scaling)
    # The leader's stages per sample, their serial part and the implied rate at 16 and 64
    # threads, on the real-photo set (built once, cached in the build directory).
    exec "$bin" --cache "$build/benchmarks/scaling_set" "$@" ;;
  fanout)
    # The real-photo JPEG set (500x375, q90) as HDF5, built once and cached in the build dir.
    exec "$bin" --cache "$build/benchmarks/fanout_set" "$@" ;;
  *)
    exec "$bin" "$@" ;;
esac
