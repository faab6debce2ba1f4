#!/usr/bin/env bash
# Builds the tests of the `unit` and `service` ctest labels with a sanitizer and runs them.
# Usage: scripts/sanitize.sh thread|address BUILD_DIR [--build-only] [ctest args...]
#   thread   ThreadSanitizer             (-DBATCHCAST_SANITIZE=thread)
#   address  AddressSanitizer + UBSan     (-DBATCHCAST_SANITIZE=address,undefined), leaks on
# Only the test binaries of those labels are built (the CMake target tests_unit_service; no
# LibTorch, CUDA, Python or benchmarks).
# --build-only: configure and build, run nothing (`make test` builds both sanitizer trees at
# the lowest priority while the normal suite runs, then runs them; docs/testing.md).
# The tests run CTEST_JOBS (default 2) at a time, as in the normal suite.
# Suppressions (tests/sanitizers/*.supp) cover third-party libraries only; a finding in
# Batchcast code fails its test. JOBS (default 2) sets the build parallelism; extra CMake
# flags come from SANITIZE_CMAKE_FLAGS (e.g. -DCMAKE_CXX_COMPILER_LAUNCHER=ccache to iterate).
# See docs/testing.md.
set -euo pipefail
kind=${1:?usage: scripts/sanitize.sh thread|address BUILD_DIR [ctest args...]}
build=${2:?usage: scripts/sanitize.sh thread|address BUILD_DIR [ctest args...]}
shift 2
build_only=0
if [ "${1:-}" = "--build-only" ]; then build_only=1; shift; fi
src=$(cd "$(dirname "$0")/.." && pwd)
supp=$src/tests/sanitizers
# Optimisation: TSan at -O1 (as fast to compile as a plain -O1 build, and -O0 runs slower).
# ASan+UBSan at -O0: GCC 12 spends 2-5x longer per file on -O1 with UBSan's checks than
# without (docs/testing.md), and -O0 keeps every check the optimiser would fold away.
# Compilers: GCC for ThreadSanitizer; clang for ASan+UBSan, whose -O0 -g1 translation units
# compile about 30% faster than GCC 12's (user CPU of one unity TU of runtime/node: 4.2 s
# against 6.1 s; docs/testing.md "Cost"). SANITIZE_CC/SANITIZE_CXX override either.
case $kind in
  thread) sanitize=thread opt=-O1 cc=gcc cxx=g++ ;;
  address) sanitize=address,undefined opt=-O0 cc=clang cxx=clang++ ;;
  *) echo "sanitize: unknown kind '$kind' (thread or address)" >&2; exit 2 ;;
esac

# -g1 (line tables, BATCHCAST_DEBUG_INFO=lines) without NDEBUG: sanitizer stacks keep
# file:line, asserts are on; -g1 instead of -g cuts a sanitizer TU's compile by 15-25%.
# A unity build (CMake compiles each target's .cc files in batches of 8 as one): a third less
# CPU than file by file, measured on the TSan tree (docs/testing.md "Cost"); larger batches
# saved 4-5% more, within the noise (same place), and are not used. Two files of one target
# that define the same name in their anonymous namespaces break it: give one a distinct name or
# move the shared helper to a header.
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Sanitize \
    -DCMAKE_C_COMPILER="${SANITIZE_CC:-$cc}" -DCMAKE_CXX_COMPILER="${SANITIZE_CXX:-$cxx}" \
    -DCMAKE_CXX_FLAGS_SANITIZE="$opt -g" -DCMAKE_C_FLAGS_SANITIZE="$opt -g" \
    -DBATCHCAST_DEBUG_INFO=lines -DBATCHCAST_SANITIZE=$sanitize -DBATCHCAST_CUDA=OFF -DBATCHCAST_TORCH=OFF -DBATCHCAST_WERROR=ON \
    -DBATCHCAST_PYTHON=OFF -DBATCHCAST_BUILD_BENCHMARKS=OFF -DCMAKE_UNITY_BUILD=ON \
    ${SANITIZE_CMAKE_FLAGS:-}
fi
cmake --build "$build" -j "${JOBS:-2}" --target tests_unit_service
if [ "$build_only" = 1 ]; then exit 0; fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI must not unload its components: their leak and race reports would lose their stacks.
export OMPI_MCA_mca_base_component_disable_dlclose=1
# halt_on_error: the first report kills the process and so fails its test; exitcode 66 tells a
# sanitizer death apart. log_path: every process writes its reports to $build/sanitizer-logs/,
# including children (service_server, service_consumer, batchcast) whose exit status or output a
# test does not look at; any report there fails this script after ctest, whatever ctest said.
logs=$(cd "$build" && pwd)/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
common="halt_on_error=1 exitcode=66 log_path=$logs/$kind"
export TSAN_OPTIONS="$common suppressions=$supp/tsan.supp second_deadlock_stack=1"
export ASAN_OPTIONS="$common detect_leaks=1 detect_stack_use_after_return=1 check_initialization_order=1 strict_init_order=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp print_suppressions=0"
export UBSAN_OPTIONS="$common suppressions=$supp/ubsan.supp print_stacktrace=1"
status=0
(cd "$build" && ctest -L '^(unit|service)$' --output-on-failure --timeout 600 \
   -j "${CTEST_JOBS:-2}" "$@") || status=$?
reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
  for f in $reports; do
    echo "=== sanitizer report: $f"
    cat "$f"
  done
  echo "sanitize ($kind): $(echo "$reports" | wc -l) process(es) reported findings (above; logs in $logs)" >&2
  exit 1
fi
# UBSan prints to stderr even with log_path; a child's report lands in its test's output.
ubsan=$(grep -E '^[^ ]+:[0-9]+:[0-9]+: runtime error: ' "$build/Testing/Temporary/LastTest.log" || true)
if [ -n "$ubsan" ]; then
  echo "$ubsan"
  echo "sanitize ($kind): UBSan reported undefined behaviour (above; stacks in $build/Testing/Temporary/LastTest.log)" >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then exit "$status"; fi
echo "sanitize ($kind): no findings"
