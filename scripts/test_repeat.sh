#!/usr/bin/env bash
# Runs the tests of one ctest label N times and prints how often each test failed: the
# flake hunt of docs/testing.md ("A suite that does not flake").
#
#   scripts/test_repeat.sh BUILD_DIR LABEL N [ctest args...]     (make test-repeat N=20 LABEL=mpi)
#
# Every run is a whole `ctest -L LABEL` (two tests at a time, CTEST_JOBS, as `make test`
# runs them), so tests see the same neighbours as in CI. LOAD=1 keeps one core busy with
# `stress-ng --cpu 1` for the whole repetition (the load under which flakes show). The
# output of every failed test is kept in BUILD_DIR/test-repeat/<label>/<test>.<run>.log.
# Exits 1 when any test failed in any run.
set -uo pipefail
build=${1:?usage: test_repeat.sh BUILD_DIR LABEL N [ctest args]}
label=${2:?label}
n=${3:?number of runs}
shift 3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
out=$build/test-repeat/$label
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)

stress_pid=
if [ "${LOAD:-0}" = 1 ]; then
  command -v stress-ng >/dev/null || { echo "test-repeat: LOAD=1 needs stress-ng (scripts/deps.sh)"; exit 2; }
  stress-ng --cpu 1 --quiet &  # one core busy for the whole repetition
  stress_pid=$!
  trap 'kill "$stress_pid" 2>/dev/null; wait "$stress_pid" 2>/dev/null' EXIT
fi

declare -A fails=()
declare -A seen=()
declare -A skipped=()
start=$SECONDS
for ((run = 1; run <= n; run++)); do
  junit=$out/run$run.xml
  (cd "$build" && ctest -L "^${label}$" --timeout 600 -j "${CTEST_JOBS:-2}" --output-junit "$junit" \
      "$@" >"$out/run$run.out" 2>&1)
  if [ ! -s "$junit" ]; then  # ctest itself failed (e.g. listing a gtest binary): a failed run
    seen["(ctest)"]=1
    fails["(ctest)"]=$((${fails["(ctest)"]:-0} + 1))
    cp "$out/run$run.out" "$out/(ctest).$run.log"
    echo "test-repeat: run $run: ctest ran no test:"
    tail -n 12 "$out/run$run.out"
    continue
  fi
  # One line per test: "name status" from ctest's JUnit file.
  while read -r name status; do
    seen[$name]=1
    [ "$status" = skipped ] && skipped[$name]=1  # e.g. a GPU test without a device (exit 77)
    if [ "$status" = fail ]; then
      fails[$name]=$((${fails[$name]:-0} + 1))
      /usr/bin/python3 - "$junit" "$name" >"$out/$name.$run.log" <<'PY'
import sys, xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.get("name") == sys.argv[2]:
        for child in case:
            print(child.text or child.get("message") or "")
PY
    fi
  done < <(/usr/bin/python3 - "$junit" <<'PY'
import sys, xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    status = case.get("status", "run")
    bad = status == "fail" or case.find("failure") is not None or case.find("error") is not None
    print(case.get("name"), "fail" if bad else ("skipped" if status == "notrun" else "ok"))
PY
)
  total=0
  for k in "${!fails[@]}"; do total=$((total + fails[$k])); done
  echo "test-repeat: label $label run $run/$n done after $((SECONDS - start)) s: $total failures so far"
done

echo
printf '%-52s %s\n' "test (label $label, $n runs${stress_pid:+, stress-ng --cpu 1})" "failed"
bad=0
for name in $(printf '%s\n' "${!seen[@]}" | sort); do
  f=${fails[$name]:-0}
  printf '%-52s %d/%d%s\n' "$name" "$f" "$n" "${skipped[$name]:+ (skipped in some runs)}"
  [ "$f" -eq 0 ] || bad=1
done
[ ${#seen[@]} -gt 0 ] || { echo "test-repeat: no test has label $label"; exit 2; }
echo "test-repeat: $((SECONDS - start)) s; logs of failed runs in $out"
exit $bad
