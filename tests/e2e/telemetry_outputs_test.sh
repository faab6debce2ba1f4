#!/usr/bin/env bash
# Every output path of a run is checked when the run starts, and a failure to write at the end
# is an error the caller sees (issue 32; docs/telemetry.md "Outputs are checked at the start").
# One case per front door tested here (the others: tests/python/test_telemetry.py, the C API in
# tests/capi/capi_test.c, batchcast-run in launcher_test.sh, train-many in train_many_test.sh):
#   serve_start     batchcast serve refuses an unwritable telemetry path (and report --out) at
#                   once, naming the path and the cause, before it listens
#   serve_end       a run directory removed while serving: SIGTERM ends it with exit status 1
#                   and the file named (it used to log the error and exit 0)
#   mpi_runtime     an MPI job (batchcast::Runtime under mpirun) refuses an unwritable path on
#                   every rank before any batch; with dir:RUN rank 0 writes one job file whose
#                   leader ledger lists each trainer rank, which `batchcast report RUN` merges
# Usage: telemetry_outputs_test.sh CASE  (BATCHCAST_BIN; MPIEXEC, MPI_DATAPLANE,
#        MAKE_PHOTO_DATASET for mpi_runtime)
set -euo pipefail
case_name=${1:?case}
bin=${BATCHCAST_BIN:?}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d "$PWD/bc-e2e-outputs.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
rc=0
exit_status() { set +e; "$@"; rc=$?; set -e; }  # runs COMMAND..., its exit status in $rc
fail() { echo "FAIL: $*" >&2; for f in out.txt err.txt; do [ -f $f ] && { echo "--- $f" >&2; cat $f >&2; }; done; exit 1; }

make_dataset() {  # Fashion-MNIST t10k, raw, the first 256 samples used
  local fm=/usr/share/datasets/fashion-mnist
  "$bin" convert idx --images "$fm/t10k-images-idx3-ubyte.gz" \
    --labels "$fm/t10k-labels-idx1-ubyte.gz" --out d.h5 --encode raw >/dev/null
}

case_serve_start() {
  make_dataset
  echo x > plain  # a regular file: no path below it can be made, not even by root
  local sock="bc-outputs-$$"
  for spec in "hdf5=$work/plain/run.h5" "dir:$work/plain/run" "telemetry(json=$work/plain/x.json)"; do
    exit_status timeout 60 "$bin" serve --socket "$sock" --dataset d.h5 --limit-samples 256 \
      --telemetry "$spec" >out.txt 2>err.txt
    [ $rc -eq 2 ] || fail "serve with telemetry '$spec' exited $rc, expected 2 at once"
    grep -q "$work/plain" err.txt || fail "serve did not name the path for '$spec'"
    grep -q "Not a directory" err.txt || fail "serve did not give the cause for '$spec'"
    grep -q "listening" out.txt && fail "serve listened before refusing '$spec'"
  done
  exit_status "$bin" report d.h5 --out "$work/plain/report" >out.txt 2>err.txt
  [ $rc -eq 2 ] || fail "report --out under a file exited $rc, expected 2"
  grep -q "report directory $work/plain/report" err.txt || fail "report did not name its --out"
  echo "PASS: serve_start"
}

case_serve_end() {
  make_dataset
  local sock="bc-outputs-end-$$"
  mkfifo serve.out
  "$bin" serve --socket "$sock" --dataset d.h5 --limit-samples 256 \
    --telemetry "dir:$work/run" >serve.out 2>err.txt &
  local pid=$!
  exec 3<serve.out
  local line
  while IFS= read -r line <&3; do  # its own "listening" line says it is ready
    echo "$line" >>out.txt
    [[ $line == *listening* ]] && break
  done
  grep -q "listening" out.txt || fail "serve did not start"
  ls run/service-*.h5 >/dev/null || fail "serve did not claim its file in the run directory"
  rm -rf run && echo x > run  # the directory is gone and cannot be made again
  kill -TERM $pid
  cat <&3 >>out.txt
  exit_status wait $pid
  [ $rc -eq 1 ] || fail "serve exited $rc after its telemetry could not be written, expected 1"
  grep -q "telemetry: .*$work/run/service-" err.txt || fail "serve did not name the file"
  echo "PASS: serve_end"
}

case_mpi_runtime() {
  local mpiexec=${MPIEXEC:?} prog=${MPI_DATAPLANE:?} makeset=${MAKE_PHOTO_DATASET:?}
  "$makeset" photos.h5 --images 48 --width 32 --height 24 >/dev/null
  echo x > plain
  local common=(--dataset=photos.h5 --image_size=16 --threads=1 --epochs=1 --name=outputs
                --bs=8 --job_id="outputs-$$" --heartbeat_ms=30s)
  exit_status timeout -k 5 120 "$mpiexec" --oversubscribe --bind-to none -n 3 "$prog" \
    "${common[@]}" --telemetry="hdf5=$work/plain/job.h5" >out.txt 2>&1
  [ $rc -ne 0 ] || fail "the MPI job ran with an unwritable telemetry path"
  [ "$(grep -c "runtime create failed: .*telemetry hdf5 file $work/plain/job.h5.*Not a directory" out.txt)" -eq 3 ] ||
    fail "not every rank refused the path at Runtime::Create, naming it and the cause"
  grep -q "^PASS" out.txt && fail "the job ran batches"
  timeout -k 5 120 "$mpiexec" --oversubscribe --bind-to none -n 3 "$prog" "${common[@]}" \
    --telemetry="dir:$work/run" >out.txt 2>&1 || fail "the MPI job with dir:run failed"
  [ "$(ls run | wc -l)" -eq 1 ] || fail "expected one gathered job file, got: $(ls run)"
  ls run/job-*.h5 >/dev/null || fail "the job file is not named job-<host>-<pid>.h5: $(ls run)"
  "$bin" report run --out report >out.txt 2>&1 || fail "batchcast report run failed"
  /usr/bin/python3 - report/report-data.json <<'PY' || fail "the report does not list the trainer ranks as trials"
import json, sys
run = json.load(open(sys.argv[1]))[0]
trials = run["trials"]
assert len(trials) == 2, trials
assert all(t["end"] in ("detached", "attached") and t["samples"] >= 48 for t in trials), trials
assert all(t["own"] is not None for t in trials), "each trainer rank matched to its rank"
assert run["job"]["ranks"] == 3 and run["job"]["trials"] == 2
PY
  echo "PASS: mpi_runtime"
}

"case_$case_name"
