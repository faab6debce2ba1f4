#!/usr/bin/env bash
# The body of `make test` after the normal build: the whole ctest suite, then the second PyTorch
# generation's tests (torch 2.x + numpy 2 from PyPI, scripts/torch2_tree.sh), ThreadSanitizer,
# ASan+UBSan and the short fuzzing step.
# Usage: scripts/test_all.sh BUILD TSAN_DIR ASAN_DIR FUZZ_DIR [TORCH2_DIR]   (no TORCH2_DIR, or
# TORCH2=OFF in the environment: no second torch generation)
#
# The extra trees are built one after another by one background chain at `nice 19`
# while the normal suite runs (it spends much of its wall time waiting on daemons and mpirun,
# and the builds take only that idle CPU). The chain reports each finished build on a FIFO;
# the foreground runs a tree's tests as soon as both that tree and the normal suite are done,
# so the sanitizer runs overlap the remaining builds instead of waiting for all of them
# (docs/testing.md "Wall time"). Each step runs even when an earlier one failed; any failure
# fails the script. Build output goes to BUILD/sanitizer-builds.log, printed when a build fails.
set -uo pipefail
build=${1:?usage: scripts/test_all.sh BUILD TSAN_DIR ASAN_DIR FUZZ_DIR}
tsan=${2:?}; asan=${3:?}; fuzz=${4:?}; torch2=${5:-}
steps="tsan asan fuzz"
if [ -n "$torch2" ] && [ "${TORCH2:-ON}" != OFF ]; then
  steps="torch2 $steps"
fi
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=${SANITIZE_JOBS:-2}
# The torch 2 tree takes the main tree's debug information (scripts/torch2_tree.sh).
export MAIN_BUILD=$build
log=$build/sanitizer-builds.log
stages=$build/.extra-builds.fifo
rm -f "$stages"
mkfifo "$stages"
: >"$log"

# One line "NAME RC" per finished build, in the order of $steps. The chain keeps building after a
# failed tree so that the other steps still run.
(
  exec >"$stages"
  for step in $steps; do
    case $step in
      torch2) JOBS=$jobs nice -n 19 bash "$src/scripts/torch2_tree.sh" build "$torch2" ;;
      tsan) JOBS=$jobs nice -n 19 bash "$src/scripts/sanitize.sh" thread "$tsan" --build-only ;;
      asan) JOBS=$jobs nice -n 19 bash "$src/scripts/sanitize.sh" address "$asan" --build-only ;;
      fuzz) JOBS=$jobs nice -n 19 bash "$src/scripts/fuzz.sh" build "$fuzz" ;;
    esac >>"$log" 2>&1
    echo "$step $? $SECONDS"
  done
) &
chain=$!
# Opening the FIFO for reading returns once the chain has opened it for writing; lines the
# chain writes before we read them wait in the pipe. EOF before every line: the chain died.
exec 4<"$stages"
rm -f "$stages"

# One line per step for the end of `make test` (CI shows only the last lines of the output):
# ok, or FAILED with the tree's failed tests.
summary=$build/test-summary.txt
: >"$summary"
# A failed test's first output lines that say what failed (from ctest's LastTest.log), so that
# the summary a CI reader sees names the cause, not only the test.
failure_lines() {  # TREE TEST_NAME
  awk -v n="$2" '$2 == "Testing:" && $NF == n { on = 1; next }
                 on && index($0, "\"" n "\" end time") == 1 { exit }
                 on' "$1/Testing/Temporary/LastTest.log" 2>/dev/null |
    grep -m 3 -E 'FAIL|Failure|[Ee]rror|timed out|Expected|Which is|Value of' | cut -c1-240
}

# Times are make test's (TEST_ALL_OFFSET: the seconds it had run before this script).
note() {  # STEP RC [TREE]
  local step=$1 rc=$2 tree=${3:-} failed at=$((SECONDS + ${TEST_ALL_OFFSET:-0})) t
  if [ "$rc" = 0 ]; then echo "make test: $step: ok (at $at s)" >>"$summary"; return; fi
  echo "make test: $step: FAILED (exit $rc, at $at s)" >>"$summary"
  failed=${tree:+$tree/Testing/Temporary/LastTestsFailed.log}
  if [ -n "$failed" ] && [ -s "$failed" ]; then
    head -n 20 "$failed" | while IFS= read -r t; do
      echo "make test:   failed: $t"
      failure_lines "$tree" "${t#*:}" | sed 's/^/make test:     /'
    done >>"$summary"
  fi
}

status=0
torch2_pid=
rm -f "$build/Testing/Temporary/LastTestsFailed.log"
bash "$src/scripts/test.sh" "$build"
rc=$?
note "the normal suite" "$rc" "$build"
[ "$rc" = 0 ] || status=1
echo "test_all: the normal suite ended at ${SECONDS} s"

for expected in $steps; do
  if ! read -r -u 4 step rc built_at; then
    echo "test_all: the background builds stopped before '$expected' was built; log:" >&2
    cat "$log"
    note "building $expected" "stopped"
    status=1
    break
  fi
  echo "test_all: '$step' built at ${built_at} s, its tests start at ${SECONDS} s"
  if [ "$rc" != 0 ]; then
    echo "test_all: building '$step' failed (exit $rc); log:" >&2
    cat "$log"
    note "building $step" "$rc"
    status=1
    continue
  fi
  case $step in
    # The second torch generation's tests run beside the sanitizer steps (they mostly wait on
    # processes, as the normal suite does); their output is printed when they end.
    torch2) rm -f "$torch2/Testing/Temporary/LastTestsFailed.log"
            bash "$src/scripts/torch2_tree.sh" test "$torch2" >"$build/torch2-tests.log" 2>&1 &
            torch2_pid=$! ;;
    tsan) rm -f "$tsan/Testing/Temporary/LastTestsFailed.log"
          JOBS=$jobs bash "$src/scripts/sanitize.sh" thread "$tsan"; rc=$?
          note "ThreadSanitizer" "$rc" "$tsan" ;;
    asan) rm -f "$asan/Testing/Temporary/LastTestsFailed.log"
          JOBS=$jobs bash "$src/scripts/sanitize.sh" address "$asan"; rc=$?
          note "ASan+UBSan" "$rc" "$asan" ;;
    fuzz) JOBS=$jobs FUZZ_CI_SECONDS=${FUZZ_CI_SECONDS:-8} \
            bash "$src/scripts/fuzz.sh" ci "$fuzz"; rc=$?
          note "fuzzing" "$rc"
          # Which target failed, and its sanitizer or libFuzzer report's first lines.
          [ "$rc" = 0 ] || grep -h -A 4 'FAILED' "$fuzz"/logs/summary/*.txt 2>/dev/null |
            head -n 12 | cut -c1-240 | sed 's/^/make test:   /' >>"$summary" ;;
  esac
  [ "${rc:-0}" = 0 ] || status=1
  rc=0
done
exec 4<&-
echo "test_all: sanitizer and fuzzing steps ended at ${SECONDS} s"
wait "$chain" || true
if [ -n "${torch2_pid:-}" ]; then
  wait "$torch2_pid"; rc=$?
  [ "$rc" = 0 ] || status=1
  echo "=== the second PyTorch generation's tests ($torch2, ctest -L torch) ==="
  cat "$build/torch2-tests.log"
  note "torch 2 tests" "$rc" "$torch2"
fi
exit $status
