#!/usr/bin/env bash
# Drivers of the C API tests (tests/capi/CMakeLists.txt).
#   run_capi.sh c_api MAKE_PHOTO_DATASET DATA_DIR CAPI_TEST   (capi_test, capi_handles_test)
#   run_capi.sh c_trainer MAKE_PHOTO_DATASET DATA_DIR C_TRAINER MPIEXEC
#   run_capi.sh abi LIB ABI_LAYOUT BASELINE ABI_CHECK_PY
set -euo pipefail
case=$1
shift
case $case in
  c_api)
    makeset=$1 data=$2 prog=$3
    mkdir -p "$data"
    [ -f "$data/photos-40.h5" ] || "$makeset" "$data/photos-40.h5" --images 40 --width 32 --height 24
    "$prog" "$data/photos-40.h5" 40
    ;;
  c_trainer)
    makeset=$1 data=$2 prog=$3 mpiexec=$4
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mkdir -p "$data"
    [ -f "$data/photos-120.h5" ] || "$makeset" "$data/photos-120.h5" --images 120 --width 32 --height 24
    out=$(timeout -k 5 150 "$mpiexec" --oversubscribe --bind-to none -n 3 "$prog" \
          "$data/photos-120.h5" 120 2 12 2>&1) || { echo "$out"; echo "FAIL: c_trainer exited $?"; exit 1; }
    echo "$out"
    [ "$(grep -c ': OK$' <<<"$out")" -eq 3 ] || { echo "FAIL: not every rank reported OK"; exit 1; }
    # Every rank saw the same pixels: one checksum in all three lines.
    [ "$(grep -o 'checksum [0-9a-f]*' <<<"$out" | sort -u | wc -l)" -eq 1 ] || {
      echo "FAIL: ranks report different checksums"; exit 1; }
    ;;
  abi)
    lib=$1 layout=$2 baseline=$3 check=$4
    py=/usr/bin/python3
    "$py" "$check" "$lib" "$layout" "$baseline"
    # The check itself: incompatible changes under the same SONAME fail, a new SONAME passes.
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$py" "$check" "$lib" "$layout" "$tmp/now.abi" --update >/dev/null
    mutate() {  # NAME PYTHON-STATEMENT-ON-b: a baseline that differs from the library so
      "$py" - "$tmp/now.abi" "$tmp/$1.abi" "$2" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(b, open(sys.argv[2], "w"))
PY
    }
    expect_fail() {  # NAME WHAT
      if out=$("$py" "$check" "$lib" "$layout" "$tmp/$1.abi"); then
        echo "$out"; echo "FAIL: abi_check accepted $2"; exit 1
      fi
      grep -q "FAIL: 1 incompatible" <<<"$out" || { echo "$out"; echo "FAIL: $2: wrong report"; exit 1; }
    }
    mutate removed 'b["symbols"].append("_ZN9batchcast12GoneFunctionEv")'
    expect_fail removed "a removed symbol"
    mutate moved 'b["structs"]["bc_batch_info_t"]["fields"]["epoch"] += 8'
    expect_fail moved "a moved C field"
    mutate grown 'b["structs"]["batchcast::BatchInfo"]["size"] -= 8'
    expect_fail grown "a grown by-value C++ struct"
    mutate appended 'b["structs"]["bc_consumer_config_t"]["size"] -= 8'
    "$py" "$check" "$lib" "$layout" "$tmp/appended.abi" >/dev/null || {
      echo "FAIL: abi_check refused a C struct grown at the end"; exit 1; }
    mutate bumped 'b["symbols"].append("_ZN9batchcast12GoneFunctionEv"); b["soname"] = "libbatchcast.so.0.0"'
    "$py" "$check" "$lib" "$layout" "$tmp/bumped.abi" | grep -q "SONAME changed" || {
      echo "FAIL: abi_check refused a change under a new SONAME"; exit 1; }
    echo "abi: PASS"
    ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
