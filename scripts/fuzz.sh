#!/usr/bin/env bash
# libFuzzer targets of tests/fuzz (docs/testing.md "Fuzzing").
#
#   scripts/fuzz.sh build [BUILD_DIR]          configure (clang) and build every target
#   scripts/fuzz.sh run   [BUILD_DIR]          fuzz each target FUZZ_SECONDS (default 600)
#   scripts/fuzz.sh ci    [BUILD_DIR]          replay the corpus, then fuzz each target
#                                              FUZZ_CI_SECONDS (default 8): `make test`
#
# FUZZ_TARGETS restricts the targets (default: all). Each run starts from the checked-in
# seed corpus tests/fuzz/corpus/<target>/ and keeps what it finds in BUILD_DIR/corpus/<target>
# (never in the source tree). A crash, leak, sanitizer report, timeout (FUZZ_TIMEOUT seconds
# for one input, default 10) or out-of-memory (FUZZ_RSS_MB, default 2048) fails the script;
# the reproducer is written to BUILD_DIR/artifacts/<target>/ and its path printed.
set -uo pipefail

cmd=${1:-}
build=${2:-build-fuzz}
root=$(cd "$(dirname "$0")/.." && pwd)
all_targets="fuzz_image fuzz_hdf5 fuzz_idx fuzz_spec fuzz_control"
targets=${FUZZ_TARGETS:-$all_targets}
jobs=${JOBS:-2}

die() { echo "fuzz: $*" >&2; exit 2; }

build_targets() {
  command -v clang++ >/dev/null ||
    die "clang++ not found: run scripts/deps.sh (Debian packages clang, libclang-rt-14-dev)"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root/tests/fuzz" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=None ${FUZZ_CMAKE_FLAGS:-} >/dev/null || die "configure of $build failed"
  fi
  # shellcheck disable=SC2086
  cmake --build "$build" -j "$jobs" --target $targets || die "build of $build failed"
}

# fuzz TARGET SECONDS: replays the seed corpus, then mutates for SECONDS (0: replay only).
fuzz_one() {
  local t=$1 secs=$2
  local seeds=$root/tests/fuzz/corpus/$t work=$build/corpus/$t art=$build/artifacts/$t/
  local log=$build/logs/$t.log
  [ -d "$seeds" ] || die "no seed corpus $seeds"
  mkdir -p "$work" "$art" "$build/logs"
  local asan=detect_leaks=1
  # HDF5 1.10 allocates what a mutated file declares (an object header's chunk size, ...)
  # before it checks it. The reader checks the superblock and the root group's header
  # first (CheckHdf5Superblock), not every object header: for fuzz_hdf5 an allocation
  # above 1 GiB fails as malloc does when memory runs out (NULL), which HDF5 turns into an
  # error; one of ours that size would still crash and be reported.
  # HDF5's error paths after such a failed allocation leak a few bytes inside libhdf5:
  # tests/fuzz/lsan_hdf5.supp says why those (and only libhdf5's) are suppressed here.
  local lsan=
  if [ "$t" = fuzz_hdf5 ]; then
    asan=$asan:allocator_may_return_null=1:max_allocation_size_mb=1024
    lsan=suppressions=$root/tests/fuzz/lsan_hdf5.supp:print_suppressions=0
  fi
  local args=(-timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}"
              -artifact_prefix="$art" -print_final_stats=1 -detect_leaks=1)
  local rc ubsan=print_stacktrace=1:halt_on_error=1
  if [ "$secs" -gt 0 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-$asan} UBSAN_OPTIONS=${UBSAN_OPTIONS:-$ubsan} \
      LSAN_OPTIONS=${LSAN_OPTIONS:-$lsan} "$build/$t" "${args[@]}" -max_total_time="$secs" "$work" "$seeds" >"$log" 2>&1
    rc=$?
  else
    ASAN_OPTIONS=${ASAN_OPTIONS:-$asan} UBSAN_OPTIONS=${UBSAN_OPTIONS:-$ubsan} \
      LSAN_OPTIONS=${LSAN_OPTIONS:-$lsan} "$build/$t" "${args[@]}" -runs=0 "$seeds" >"$log" 2>&1
    rc=$?
  fi
  local execs corpus
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  corpus=$(ls "$work" 2>/dev/null | wc -l)
  if [ $rc -ne 0 ] || grep -q 'runtime error:' "$log"; then
    printf '%-14s %6ss %10s execs  FAILED (exit %s)\n' "$t" "$secs" "${execs:-?}" "$rc"
    grep -E 'ERROR: |runtime error:|fuzz invariant|Test unit written|SUMMARY' "$log" | head -n 12
    echo "  full log: $log"
    return 1
  fi
  printf '%-14s %6ss %10s execs  ok (corpus %s)\n' "$t" "$secs" "${execs:-?}" "$corpus"
}

# One target: the corpus replayed, then fuzzing for `secs` seconds.
one_target() {
  local t=$1 secs=$2
  if [ "${FUZZ_REPLAY:-1}" = 1 ] && [ "$secs" -gt 0 ]; then
    fuzz_one "$t" 0 >/dev/null || { fuzz_one "$t" 0; return 1; }
  fi
  fuzz_one "$t" "$secs"
}

# Every target, JOBS (default 2) at a time: a libFuzzer process uses one core. Each target's
# report is printed in the usual order once all are done.
run_all() {
  local secs=$1 rc=0 t parallel=${JOBS:-2} out=$build/logs/summary
  rm -rf "$out"
  mkdir -p "$out"
  printf '%-14s %7s %10s\n' target seconds executions
  for t in $targets; do
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
    ( one_target "$t" "$secs" >"$out/$t.txt" 2>&1; echo $? >"$out/$t.rc" ) &
  done
  wait
  for t in $targets; do
    cat "$out/$t.txt"
    [ "$(cat "$out/$t.rc" 2>/dev/null)" = 0 ] || rc=1
  done
  return $rc
}

case "$cmd" in
  build) build_targets ;;
  run) build_targets && run_all "${FUZZ_SECONDS:-600}" ;;
  ci) build_targets && run_all "${FUZZ_CI_SECONDS:-8}" ;;
  *) die "usage: scripts/fuzz.sh build|run|ci [BUILD_DIR] (docs/testing.md)" ;;
esac
