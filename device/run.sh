#!/usr/bin/env bash
# The GPU proof in one command (docs/gpu.md "Running the proof on the GPU machine"):
#   bash device/run.sh            (the bundle in device/bundle, made here by make device-bundle)
# Unpacks the bundle, then runs each item of docs/gpu.md's checklist under its own timeout,
# printing one JSON line per item ({"item", "kind", "status": pass|fail|skip, "seconds",
# "estimate_s", "message"|"reason", "data"}) and a summary line; the same lines go to
# $OUT/device-proof.jsonl with each item's log in $OUT/logs.tar.gz when OUT is set. Exits 0
# whatever failed. kind "cpu": runs anywhere (the self-test here must pass it); kind
# "device": skips with "no CUDA device: <cause>" where no GPU is visible.
# Budget: BC_DEVICE_BUDGET seconds in all (default 480); an item whose estimate no longer
# fits is skipped, saying so. Needs bash, coreutils, a C++ compiler (the torch items) and
# the machine's Python with torch (found as /opt/torch/.venv/bin/python3, else python3).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bundle=${BC_DEVICE_BUNDLE:-$repo/device/bundle}
work=${BC_DEVICE_WORK:-/tmp/bc-device}
budget=${BC_DEVICE_BUDGET:-480}
out=${OUT:-}
t_start=$(date +%s)
cores=$(nproc)

rm -rf "$work"
mkdir -p "$work/logs" "$work/data" "$work/tmp"
results=$work/device-proof.jsonl
: >"$results"

json_str() {  # TEXT -> a JSON string
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/ }
  s=${s//$'\r'/}
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')"
}
emit() {  # ITEM KIND STATUS SECONDS ESTIMATE TEXT [DATA_JSON]
  local key=message
  [ "$3" = skip ] && key=reason
  local line="{\"item\": \"$1\", \"kind\": \"$2\", \"status\": \"$3\", \"seconds\": $4, \"estimate_s\": $5, \"$key\": $(json_str "$6")"
  [ -n "${7:-}" ] && line="$line, \"data\": $7"
  line="$line}"
  echo "$line" | tee -a "$results"
}
elapsed() { echo $(( $(date +%s) - t_start )); }

# --- unpack and set up ---------------------------------------------------------------------
if [ ! -f "$bundle/payload.tar.xz" ]; then
  emit bundle cpu fail 0 5 "no $bundle/payload.tar.xz: run make device-bundle here and carry device/bundle"
  echo "{\"item\": \"summary\", \"pass\": 0, \"fail\": 1, \"skip\": 0, \"seconds\": $(elapsed)}" | tee -a "$results"
  [ -n "$out" ] && mkdir -p "$out" && cp "$results" "$out/"
  exit 0
fi
tar -C "$work" -xJf "$bundle/payload.tar.xz"
W=$work/payload
# The machine's Python (the GPU machine's torch venv first) and its NCCL (nvidia-nccl-cu13).
PY=${BC_DEVICE_PYTHON:-}
for c in /opt/torch/.venv/bin/python3 "$(command -v python3 2>/dev/null)"; do
  [ -z "$PY" ] && [ -n "$c" ] && [ -x "$c" ] && PY=$c
done
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
nccl_dir=""
[ -n "$site" ] && [ -e "$site/nvidia/nccl/lib/libnccl.so.2" ] && nccl_dir=$site/nvidia/nccl/lib
torch_dir=""
[ -n "$site" ] && [ -f "$site/torch/include/torch/script.h" ] && torch_dir=$site/torch
# libstdc++/libgcc_s from the bundle only where the machine's are older than ours.
ld_path=$W/lib
sys_cxx=$(ls /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.* /lib64/libstdc++.so.6.0.* 2>/dev/null | sort -V | tail -1)
our_cxx=$(ls "$W"/lib-fallback/libstdc++.so.6 2>/dev/null)
if [ -n "$our_cxx" ]; then
  need=$(strings "$W/bin/unit_gpu" "$W"/lib/*.so* 2>/dev/null | grep -o '^GLIBCXX_3\.4\.[0-9]*$' | sort -V | tail -1)
  if [ -z "$sys_cxx" ] || ! strings "$sys_cxx" 2>/dev/null | grep -qx "$need"; then
    ld_path=$ld_path:$W/lib-fallback
  fi
fi
[ -n "$nccl_dir" ] && ld_path=$ld_path:$nccl_dir
export LD_LIBRARY_PATH=$ld_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$W/bin:$W/mpi/bin:$PATH
export TMPDIR=$work/tmp
# Open MPI, relocated into the bundle.
export OPAL_PREFIX=$W/mpi OPAL_BINDIR=$W/mpi/bin OPAL_LIBDIR=$W/lib OPAL_PKGLIBDIR=$W/mpi/lib/openmpi3
export OPAL_DATADIR=$W/mpi/share OPAL_PKGDATADIR=$W/mpi/share/openmpi OPAL_SYSCONFDIR=$W/mpi/etc
export OMPI_MCA_mca_base_component_path=$W/mpi/lib/openmpi3 PMIX_MCA_mca_base_component_path=$W/mpi/lib/pmix
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=sm,pt2pt OMPI_MCA_plm=isolated
export BC_W=$W BC_WORK=$work BC_PY=$PY BC_TORCH_DIR=$torch_dir BC_REPO=$repo BC_CORES=$cores

probe=$("$W/bin/bc_device_probe" 2>&1)
devices=$(echo "$probe" | sed -n 's/.*"devices":\([0-9]*\).*/\1/p')
[ -n "$devices" ] || devices=0
cause=$(echo "$probe" | sed -n 's/.*"cause":"\([^"]*\)".*/\1/p')
env_data="{\"probe\": ${probe:-null}, \"cores\": $cores, \"python\": $(json_str "$PY"), \"torch_dir\": $(json_str "$torch_dir"), \"nccl_dir\": $(json_str "$nccl_dir"), \"ld_library_path\": $(json_str "$LD_LIBRARY_PATH"), \"uname\": $(json_str "$(uname -srm)"), \"cxx\": $(json_str "$( (${CXX:-g++} --version | head -1; ld --version | head -1) 2>/dev/null | tr '\n' ';')"), \"gpu\": $(json_str "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)")}"
echo "$probe" | grep -q '"built_with_cuda"' && st=pass || st=fail
emit environment cpu $st $(elapsed) 10 "devices: $devices${cause:+ ($cause)}" "$env_data"

# --- the items -------------------------------------------------------------------------------
# run_item NAME KIND ESTIMATE TIMEOUT FUNCTION: exit 0 pass, 77 skip (last "SKIP: " line),
# else fail (last "FAIL: " line, or the log's tail). A function may write data/NAME.json.
run_item() {
  local name=$1 kind=$2 est=$3 limit=$4 fn=$5 t0 rc msg left
  left=$(( budget - $(elapsed) ))
  if [ "$kind" = device ] && [ "$devices" -eq 0 ]; then
    emit "$name" "$kind" skip 0 "$est" "no CUDA device: ${cause:-none visible}"; return
  fi
  if [ "$left" -lt "$est" ]; then
    emit "$name" "$kind" skip 0 "$est" "no time left: ${left} s of the ${budget} s budget for an item of ~${est} s"; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s)
  ( cd "$work" && timeout -k 5 "$limit" bash -c "source '$repo/device/items.sh'; $fn" ) >"$work/logs/$name.log" 2>&1
  rc=$?
  local secs=$(( $(date +%s) - t0 )) data=""
  [ -s "$work/data/$name.json" ] && data=$(cat "$work/data/$name.json")
  if [ "$rc" -eq 0 ]; then
    msg=$(grep -E '^(OK|PASS): ' "$work/logs/$name.log" | tail -1 | sed -E 's/^(OK|PASS): //')
    emit "$name" "$kind" pass "$secs" "$est" "${msg:-ok}" "$data"
  elif [ "$rc" -eq 77 ]; then
    msg=$(grep '^SKIP: ' "$work/logs/$name.log" | tail -1 | sed 's/^SKIP: //')
    emit "$name" "$kind" skip "$secs" "$est" "${msg:-skipped}" "$data"
  else
    msg=$(grep '^FAIL: ' "$work/logs/$name.log" | tail -1 | sed 's/^FAIL: //')
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && msg="timed out after ${limit} s; ${msg}"
    [ -n "$msg" ] || msg=$(tail -n 5 "$work/logs/$name.log")
    emit "$name" "$kind" fail "$secs" "$est" "exit $rc: $msg" "$data"
  fi
}

# The LibTorch parts compile in the background from the start (they take the longest).
( cd "$work" && timeout -k 5 "${BC_TORCH_BUILD_LIMIT:-300}" bash -c "source '$repo/device/items.sh'; build_torch_parts" ) \
  >"$work/logs/torch_build.log" 2>&1 &
torch_pid=$!
t_torch=$(date +%s)

#        item                   kind   est limit function
run_item bundle_libraries       cpu      5  60 item_libraries
run_item host_job_no_cuda       cpu     10  60 item_host_job_no_cuda
run_item gpu_tests_cpu_side     cpu     20  90 item_gpu_tests_cpu_side
run_item mpi_runtime_host       cpu     20  90 item_mpi_runtime_host
run_item gpu_tests_device       device  60 180 item_gpu_tests_device
run_item host_register_memfd    device  10  60 item_host_register
run_item ipc_three_consumers    device  20  90 item_ipc_three_consumers
run_item release_ordering       device  15  90 item_release_ordering
run_item finish_kernel          device   5  60 item_finish_kernel
run_item stream_ops_ipc         device   5  60 item_stream_ops_ipc
run_item nccl_one_rank          device  10  60 item_nccl_one_rank
run_item mpi_runtime_device     device  25 120 item_mpi_runtime_device
run_item safe_path_check        device  10  60 item_safe_path_check
run_item bench_gpu              device  40 120 item_bench_gpu

wait "$torch_pid"
torch_rc=$?
torch_secs=$(( $(date +%s) - t_torch ))
torch_msg=$(grep -E '^(OK|FAIL|SKIP): ' "$work/logs/torch_build.log" | tail -1)
case "$torch_rc" in
  0) emit torch_build cpu pass "$torch_secs" 150 "${torch_msg#OK: }" ;;
  77) emit torch_build cpu skip "$torch_secs" 150 "${torch_msg#SKIP: }" ;;
  *) [ -n "$torch_msg" ] || torch_msg=$(tail -n 3 "$work/logs/torch_build.log")
     emit torch_build cpu fail "$torch_secs" 150 "exit $torch_rc: ${torch_msg#FAIL: }" ;;
esac
export BC_TORCH_BUILT=$([ "$torch_rc" -eq 0 ] && echo 1 || echo 0)
run_item torch_device_view      device  20  90 item_torch_device_view
run_item python_trainer         device  30 120 item_python_trainer
run_item model_stage_cuda       device  30 120 item_model_stage_cuda
run_item train_many_gpu         device  60 150 item_train_many_gpu
run_item bench_decode_14        cpu     60 150 item_bench_decode
run_item bench_fanout_8         cpu     60 150 item_bench_fanout

# --- summary ---------------------------------------------------------------------------------
p=$(grep -c '"status": "pass"' "$results")
f=$(grep -c '"status": "fail"' "$results")
s=$(grep -c '"status": "skip"' "$results")
echo "{\"item\": \"summary\", \"pass\": $p, \"fail\": $f, \"skip\": $s, \"seconds\": $(elapsed), \"budget_s\": $budget, \"devices\": $devices}" | tee -a "$results"
if [ -n "$out" ]; then
  mkdir -p "$out"
  cp "$results" "$out/device-proof.jsonl"
  # Logs and JSON only (the photo sets under data/ are megabytes and can be remade).
  ( cd "$work" && tar -czf "$out/logs.tar.gz" logs $(ls data/*.json torch/*.log tmp/*.log tmp/*.out tmp/lddebug.* 2>/dev/null) ) 2>/dev/null || true
fi
exit 0
