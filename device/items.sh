# The items of device/run.sh (docs/gpu.md, "What remains unproven", 1-6 and 8). Sourced by
# run.sh in a fresh bash per item, in its work folder, with BC_W (the unpacked payload),
# BC_WORK, BC_PY (the machine's Python), BC_TORCH_DIR, BC_REPO, BC_CORES and the library
# and MPI environment set. Exit 0: pass ("OK: <message>" last); 77: skip ("SKIP: <why>");
# else fail ("FAIL: <why>"). An item may leave data/<item>.json (one JSON object).
# shellcheck shell=bash

fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

# The source photos (python3-skimage's) where make_photo_dataset, bench_decode and
# photo_set.h look for them: copied from the bundle (the GPU machine has no Debian skimage).
bench_photos() {
  local d=/usr/lib/python3/dist-packages/skimage/data
  [ -f "$d/astronaut.png" ] && return 0
  mkdir -p "$d" 2>/dev/null && cp "$BC_W"/photos/* "$d/" 2>/dev/null ||
    fail "cannot place the source photos in $d (not root?)"
}
# A photo data set made by the bundle's make_photo_dataset (real JPEGs in HDF5), once; its
# path in $set.
photos() {  # N WIDTH HEIGHT
  bench_photos
  set=$BC_WORK/data/photos-$1-$2x$3.h5
  [ -f "$set" ] || make_photo_dataset "$set" --images "$1" --width "$2" --height "$3" >/dev/null ||
    fail "make_photo_dataset $1 $2x$3 failed"
}

# One test's verdict from a gtest JSON report: OK or FAIL with its failure text.
gtest_verdict() {  # REPORT TEST...
  "$BC_PY" - "$@" <<'PY'
import json, sys
report, names = sys.argv[1], sys.argv[2:]
try:
    r = json.load(open(report))
except Exception as e:
    print(f"FAIL: no gtest report ({e})"); sys.exit(1)
tests = {f"{s['name']}.{t['name']}": t for s in r.get("testsuites", []) for t in s.get("testsuite", [])}
bad = []
for n in names:
    t = tests.get(n)
    if t is None:
        bad.append(f"{n}: did not run"); continue
    if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
        bad.append(f"{n}: skipped"); continue
    if t.get("failures"):
        bad.append(f"{n}: " + " | ".join(" ".join(f["failure"].split())[:700] for f in t["failures"]))
if bad:
    print("FAIL: " + "; ".join(bad)); sys.exit(1)
print("OK: " + ", ".join(f"{n} ({tests[n].get('time', '?')})" for n in names))
PY
}

item_libraries() {
  local f missing="" n=0
  for f in "$BC_W"/bin/* "$BC_W"/lib/*.so* "$BC_W"/mpi/bin/orte*; do
    [ -L "$f" ] && continue
    n=$((n + 1))
    m=$(ldd "$f" 2>&1 | grep "not found" | awk '{print $1}' | tr '\n' ' ')
    [ -n "$m" ] && missing="$missing $(basename "$f"): $m;"
  done
  [ -z "$missing" ] || fail "unresolved libraries:$missing"
  needed=$(readelf -d "$BC_W/lib/libbatchcast.so" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  [ -n "$needed" ] || fail "readelf -d libbatchcast.so shows no NEEDED entries (no binutils?)"
  echo "$needed" | grep -qE 'cuda|nccl|nvidia' && fail "libbatchcast.so needs a CUDA library at load time: $needed"
  echo "OK: $n programs and libraries resolve every library; libbatchcast.so NEEDED: $needed"
}

# A host-path job through libbatchcast.so (the C API's leader and consumer in one process)
# that loads no CUDA library: no NCCL on the library path, and LD_DEBUG shows none opened
# (NVML aside: telemetry's GPU metrics).
item_host_job_no_cuda() {
  local set
  photos 40 32 24
  # gpu=off: the host path itself. (Under gpu=auto the leader probes the driver for a device,
  # dlopen("libcuda.so.1"), as it must: on the GPU machine that job takes the device path.)
  BATCHCAST_GPU=off LD_LIBRARY_PATH=$BC_W/lib:$BC_W/lib-fallback LD_DEBUG=files \
    LD_DEBUG_OUTPUT=$BC_WORK/tmp/lddebug capi_test "$set" 40 >"$BC_WORK/tmp/capi.out" 2>&1 || { tail -n 20 "$BC_WORK/tmp/capi.out"; fail "capi_test failed"; }
  # libnvidia-ml (NVML, the management library) is allowed: telemetry reads GPU utilisation,
  # memory and energy through it, and it creates no CUDA context; so is what NVML itself
  # loads (the driver's libraries). Anything of ours that opens a CUDA library fails here.
  # ld.so's lines read "file=LIB [0];  needed by WHO [0]" or "...;  dynamically loaded by WHO".
  local lines ours nvml f
  lines=$(cat "$BC_WORK"/tmp/lddebug.* 2>/dev/null | grep -E 'file=lib(cuda|cudart|nccl|nvidia)' |
    sed -E 's/^ *[0-9]+: *//; s/ \[[0-9]+\]//g; s/  +/ /g' | sort -u)
  # ld.so prints several lines per file ("generating link map", "calling init"...); only
  # the first names who loaded it. A file NVML loaded is NVML's on every line.
  nvml=$(echo "$lines" | grep -E 'by [^ ]*libnvidia-ml' | grep -oE 'file=[^;]*' | sort -u || true)
  ours=$(echo "$lines" | grep -vE 'file=libnvidia-ml' | grep . || true)
  for f in $nvml; do ours=$(echo "$ours" | grep -vF "$f;" || true); done
  [ -z "$ours" ] || fail "the host-path job loaded CUDA libraries: $(echo "$ours" | tr '\n' ' ')"
  [ -z "$nvml" ] || nvml=" (NVML itself loaded: $(echo "$nvml" | sed 's/file=//' | tr '\n' ' '))"
  echo "OK: capi_test (leader + consumer through libbatchcast.so) passed; no libcuda/libcudart/libnccl opened by batchcast$nvml"
}

item_gpu_tests_cpu_side() {
  unit_gpu --gtest_filter='-GpuDataPlaneTest.*:NcclOneRankTest.*:FinishKernelTest.*:StreamValueTest.*' \
    --gtest_output=json:"$BC_WORK/data/unit_gpu_cpu.json" || fail "unit_gpu (CPU side) failed"
  gtest_verdict "$BC_WORK/data/unit_gpu_cpu.json" GpuCheckTest.SoundPathPassesWithoutWarning \
    EachStep/GpuCheckFallbackTest.AutoTakesTheHostPathOnFailsNamingTheStep/checksum >/dev/null ||
    fail "the safe-path tests did not pass"
  echo "OK: $(grep -c '"result": "COMPLETED"' "$BC_WORK/data/unit_gpu_cpu.json") tests (plan, host ring, the safe-path check's fault injection)"
}

# The trainers' batch sizes: 8 and 5 (5 does not divide the producer batch, so its batches
# span two producer batches: host memory only); BS=8,4 for jobs on the device path.
mpi_job() {  # NAME RANKS ARGS...: mpirun of mpi_dataplane over the 240-photo set
  local name=$1 n=$2 set
  shift 2
  photos 240 64 48
  BATCHCAST_DEBUG=INFO BATCHCAST_DEBUG_SUBSYS=CUDA timeout -k 5 100 \
    mpirun --oversubscribe --bind-to none -n "$n" mpi_dataplane --dataset="$set" --image_size=32 \
    --crop=random --flip --seed=7 --threads=1 --job_id="device-$name-$$" --heartbeat_ms=30s \
    --epochs=2 --bs="${BS:-8,5}" --name="$name" "$@" >"$BC_WORK/tmp/$name.log" 2>&1
  local rc=$?
  cat "$BC_WORK/tmp/$name.log"
  [ "$rc" -eq 0 ] || fail "mpirun -n $n mpi_dataplane $* exited $rc"
  grep -q "^PASS mpi_dataplane" "$BC_WORK/tmp/$name.log" || fail "no PASS line from mpi_dataplane $*"
}

item_mpi_runtime_host() {  # the carried Open MPI and the MPI Runtime's host path (gpu=off)
  mpi_job mpi_host 3 --gpu=off
  echo "OK: mpirun -n 3 mpi_dataplane --gpu=off: exactly once, reference checksums"
}

item_gpu_tests_device() {
  # One unit_gpu run per group, each under its own limit, so that a test that hangs costs its
  # group's limit and the other groups still report (gtest writes its JSON only at the end).
  local group rc=0 parts=()
  for group in 'GpuDataPlaneTest.*' 'FinishKernelTest.*:StreamValueTest.*' 'NcclOneRankTest.*'; do
    local json=$BC_WORK/data/unit_gpu_device.${#parts[@]}.json
    echo "=== unit_gpu --gtest_filter=$group"
    BATCHCAST_DEBUG=INFO BATCHCAST_DEBUG_SUBSYS=CUDA timeout -k 5 75 unit_gpu \
      --gtest_filter="$group" --gtest_output=json:"$json" || { rc=1; echo "=== exit $? for $group"; }
    parts+=("$json")
  done
  "$BC_PY" - "$BC_WORK/data/unit_gpu_device.json" "${parts[@]}" >"$BC_WORK/data/gpu_tests_device.json" <<'PY'
import json, sys
merged = {"testsuites": []}
for path in sys.argv[2:]:
    try:
        merged["testsuites"] += json.load(open(path))["testsuites"]
    except Exception as e:  # a group that timed out wrote no report: its tests stay absent
        pass
json.dump(merged, open(sys.argv[1], "w"))
print(json.dumps({f"{s['name']}.{t['name']}": ("fail" if t.get("failures") else t.get("result", "?").lower())
                  for s in merged["testsuites"] for t in s["testsuite"]}))
PY
  [ "$rc" -eq 0 ] || fail "unit_gpu device tests failed (data: per test; a group that timed out is absent)"
  echo "OK: every device test of unit_gpu passed"
}
item_ipc_three_consumers() {
  gtest_verdict "$BC_WORK/data/unit_gpu_device.json" GpuDataPlaneTest.ExactlyOnceAndChecksumsOnDevice \
    GpuDataPlaneTest.ConsumerPointerAliasesTheLeaderAllocation GpuDataPlaneTest.NoDeviceMemoryGrowthOverManyEpochs
}
item_release_ordering() {
  gtest_verdict "$BC_WORK/data/unit_gpu_device.json" GpuDataPlaneTest.ReleaseOrderingUnderConcurrentDeviceWork
}
item_finish_kernel() {
  gtest_verdict "$BC_WORK/data/unit_gpu_device.json" FinishKernelTest.MatchesTheCpuNormalizePass
}
item_stream_ops_ipc() {
  gtest_verdict "$BC_WORK/data/unit_gpu_device.json" GpuDataPlaneTest.StreamWaitsOnAnIpcMappedSequenceWord \
    StreamValueTest.StreamWaitsForTheSequenceWord
}
item_nccl_one_rank() {
  gtest_verdict "$BC_WORK/data/unit_gpu_device.json" NcclOneRankTest.InitBroadcastDestroy \
    NcclOneRankTest.FanoutRootSendsBatchesAndEnd
}
item_host_register() {  # cudaHostRegister of the memfd ring, from the device tests' INFO lines
  local log=$BC_WORK/logs/gpu_tests_device.log
  [ -f "$log" ] || fail "no log of the device tests"
  echo "memlock: $(ulimit -l)"
  grep -m3 "device ring of" "$log"
  grep -q "host ring pinned" "$log" || fail "no staging ring was pinned: $(grep -m1 'cannot pin the host ring' "$log")"
  grep -q "cannot pin the host ring" "$log" && fail "some rings were not pinned: $(grep -m1 'cannot pin the host ring' "$log")"
  echo "OK: cudaHostRegister pinned every memfd host ring (ulimit -l $(ulimit -l))"
}

item_mpi_runtime_device() {  # gpu=on: the MPI Runtime's device path, leader + 2 trainers
  BS=8,4 mpi_job mpi_gpu_on 3 --gpu=on
  grep -q "gpu: node 0: device path" "$BC_WORK/tmp/mpi_gpu_on.log" || fail "the device path was not taken"
  echo "OK: $(grep -m1 'gpu: node 0: device path' "$BC_WORK/tmp/mpi_gpu_on.log" | sed 's/.*gpu: node/node/')"
}
item_safe_path_check() {  # gpu=auto passes the canary check on a real device (IPC and local map)
  BS=8,4 mpi_job mpi_gpu_auto 3 --gpu=auto
  BS=8,4 mpi_job mpi_gpu_trains 2 --gpu=auto --leader_trains=true
  for l in mpi_gpu_auto mpi_gpu_trains; do
    grep -q "gpu: node 0: device path" "$BC_WORK/tmp/$l.log" || fail "$l: the device path was not taken"
    grep -q "gpu=auto: host path" "$BC_WORK/tmp/$l.log" && fail "$l: $(grep -m1 'gpu=auto: host path' "$BC_WORK/tmp/$l.log")"
  done
  # A trainer whose batches span producer batches (batch 5 of 16) cannot be mapped: under
  # gpu=auto that trainer alone takes the host path, says so, and still gets every sample once.
  mpi_job mpi_gpu_mixed 3 --gpu=auto
  grep -q "gpu=auto: host path for this trainer" "$BC_WORK/tmp/mpi_gpu_mixed.log" ||
    fail "mpi_gpu_mixed: the batch-5 trainer did not report its host path"
  echo "OK: gpu=auto kept the device path after the canary check (IPC trainers, and the leader's local map); a batch-5 trainer fell back alone"
}

item_bench_gpu() {
  bench_gpu | tee "$BC_WORK/tmp/bench_gpu.out" || fail "bench_gpu exited $?"
  grep '^{' "$BC_WORK/tmp/bench_gpu.out" | tail -1 >"$BC_WORK/data/bench_gpu.json"
  grep -q '"skipped": true' "$BC_WORK/data/bench_gpu.json" && fail "bench_gpu skipped: $(cat "$BC_WORK/data/bench_gpu.json")"
  echo "OK: $(cut -c1-300 "$BC_WORK/data/bench_gpu.json")"
}

item_bench_decode() {  # scaling at 14 threads (fewer, and fewer images, on a smaller machine)
  bench_photos
  local t=14 images=300 reps=3
  [ "$BC_CORES" -lt 16 ] && t=$(( BC_CORES > 1 ? BC_CORES - 1 : 1 )) images=60 reps=1
  bench_decode --cache "$BC_WORK/data/decode_set" --threads "$t" --images "$images" --reps "$reps" |
    tee "$BC_WORK/tmp/bench_decode.out" || fail "bench_decode exited $?"
  grep '^{' "$BC_WORK/tmp/bench_decode.out" | tail -1 >"$BC_WORK/data/bench_decode_14.json"
  [ -s "$BC_WORK/data/bench_decode_14.json" ] || fail "no JSON line from bench_decode"
  echo "OK: threads $t: $(grep -o '"scaling_efficiency": [0-9.]*' "$BC_WORK/data/bench_decode_14.json")"
}
item_bench_fanout() {  # hand-off p50 against its floor with 8 consumers (2 on a smaller machine)
  bench_photos
  local ks=1,2,4,8 images=300 reps=3
  [ "$BC_CORES" -lt 16 ] && ks=1,2 images=60 reps=1
  bench_fanout --cache "$BC_WORK/data/fanout_set" --ks "$ks" --images "$images" --reps "$reps" |
    tee "$BC_WORK/tmp/bench_fanout.out" || fail "bench_fanout exited $?"
  grep '^{' "$BC_WORK/tmp/bench_fanout.out" | tail -1 >"$BC_WORK/data/bench_fanout_8.json"
  [ -s "$BC_WORK/data/bench_fanout_8.json" ] || fail "no JSON line from bench_fanout"
  echo "OK: consumers $ks: $(cut -c1-200 "$BC_WORK/data/bench_fanout_8.json")"
}

# --- what is compiled here against the machine's LibTorch ----------------------------------
# The model stage module, the torch device test (ToTorch(DeviceBatch) over IPC, the model
# stage on cuda) and batchcast-train-many, against torch's own headers and libraries, with
# the bundle's module archives and third-party headers. No CMake needed: one g++ per file.
build_torch_parts() {
  local T=$BC_TORCH_DIR out=$BC_WORK/torch
  [ -n "$T" ] || skip "no torch in $BC_PY's site-packages (the GPU machine has torch 2.11 there)"
  command -v "${CXX:-g++}" >/dev/null || fail "no C++ compiler (${CXX:-g++}) on this machine"
  mkdir -p "$out"
  local abi=0
  nm -D --defined-only "$T/lib/libc10.so" 2>/dev/null | grep -q '__cxx11' && abi=1
  local version
  version=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$T/version.py" 2>/dev/null | head -1)
  echo "torch $version at $T (C++11 ABI $abi)"
  # Our fmt (the archives' version) before torch's bundled one.
  local cxx=${CXX:-g++} inc=(-I"$BC_W/include" -I"$T/include" -I"$T/include/torch/csrc/api/include"
    -I"$BC_REPO" -I"$BC_REPO/runtime" -I"$BC_REPO/runtime/include" -isystem "$BC_W/include/hdf5"
    -isystem "$BC_W/include/mpi")
  local flags=(-std=c++20 -O1 -fPIC -D_GLIBCXX_USE_CXX11_ABI=$abi -DOMPI_SKIP_MPICXX=1 -w)
  local -A src=([model_stage]=$BC_REPO/runtime/stage/model_stage.cc
                [torch_device_test]=$BC_REPO/device/src/torch_device_test.cc
                [mm_config]=$BC_REPO/runtime/multimodel/config.cc
                [mm_progress]=$BC_REPO/runtime/multimodel/progress.cc
                [mm_schedule]=$BC_REPO/runtime/multimodel/schedule.cc
                [mm_trainer]=$BC_REPO/runtime/multimodel/trainer.cc
                [train_many]=$BC_REPO/launcher/train_many/main.cc)
  local pids=() names=() n
  for n in "${!src[@]}"; do
    "$cxx" "${flags[@]}" "${inc[@]}" -I"$BC_REPO/launcher" -c "${src[$n]}" -o "$out/$n.o" \
      >"$out/$n.compile.log" 2>&1 &
    pids+=($!); names+=("$n")
  done
  local i bad=""
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || bad="$bad ${names[$i]}"
  done
  if [ -n "$bad" ]; then
    for n in $bad; do echo "--- $n"; head -c 3000 "$out/$n.compile.log"; done
    fail "compile failed:$bad (logs above)"
  fi
  local A=$BC_W/archives
  local archives=(-Wl,--start-group "$A"/libbc_node.a "$A"/libbc_gpu.a "$A"/libbc_producer.a
    "$A"/libbc_pipeline.a "$A"/libbc_data.a "$A"/libbc_telemetry.a "$A"/libbc_schedule.a
    "$A"/libbc_transport.a "$A"/libbc_core.a "$A"/libcudart_static.a -Wl,--end-group)
  local deps=(-L"$BC_W/lib" -lhdf5_serial -lturbojpeg -ljpeg -lspng -lxxhash -lopencv_imgproc
    -lopencv_core -lfmt -lz -lmpi -ldl -lrt -lpthread)
  local torchlibs=(-L"$T/lib" -Wl,-rpath,"$T/lib" -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10)
  [ -f "$T/lib/libtorch_cuda.so" ] && torchlibs+=(-ltorch_cuda -lc10_cuda)
  torchlibs+=(-Wl,--as-needed -Wl,--allow-shlib-undefined)
  "$cxx" -shared -o "$out/libbatchcast_model_stage.so" "$out/model_stage.o" "${archives[@]}" \
    "${deps[@]}" "${torchlibs[@]}" >"$out/link_stage.log" 2>&1 || { cat "$out/link_stage.log"; fail "link of the model stage module failed"; }
  # Each program is its code, main included, in a shared object, plus an executable that only
  # loads it. Linked directly as executables, the GPU machine's linker refused them (seen
  # there, 2026-11-28): our archives hold hidden weak copies of libstdc++'s inline functions
  # (VISIBILITY_INLINES_HIDDEN) and LibTorch's libraries reference some of them ("hidden
  # symbol ... is referenced by DSO"); inside a shared object those copies stay local.
  link_program() {  # NAME OBJECT...
    local name=$1
    shift
    "$cxx" -shared -o "$out/lib$name.so" "$@" "${archives[@]}" "${deps[@]}" "${torchlibs[@]}" &&
      "$cxx" -o "$out/$name" -L"$out" -Wl,-rpath,"$out" -Wl,--no-as-needed -l"$name" \
        "${deps[@]}" "${torchlibs[@]}"
  }
  link_program torch_device_test "$out/torch_device_test.o" "$A/libgtest.a" >"$out/link_test.log" 2>&1 ||
    { cat "$out/link_test.log"; fail "link of torch_device_test failed"; }
  link_program batchcast-train-many "$out"/mm_*.o "$out/train_many.o" >"$out/link_tm.log" 2>&1 ||
    { cat "$out/link_tm.log"; fail "link of batchcast-train-many failed"; }
  echo "OK: torch $version (ABI $abi): libbatchcast_model_stage.so, torch_device_test, batchcast-train-many"
}

need_torch_build() {
  [ "${BC_TORCH_BUILT:-0}" = 1 ] || fail "the torch parts did not build (item torch_build)"
}

item_torch_device_view() {  # ToTorch(DeviceBatch) aliases the IPC-mapped slot
  need_torch_build
  "$BC_WORK/torch/torch_device_test" --gtest_filter='TorchDevice.ToTorchAliasesTheSlot' \
    --gtest_output=json:"$BC_WORK/data/torch_view.json" || fail "torch_device_test failed"
  gtest_verdict "$BC_WORK/data/torch_view.json" TorchDevice.ToTorchAliasesTheSlot
}

item_model_stage_cuda() {  # stage=model(...,device=cuda): once per producer batch
  need_torch_build
  "$BC_PY" "$BC_REPO/device/python/make_models.py" "$BC_WORK/models" >/dev/null || fail "making the TorchScript models failed"
  BATCHCAST_STAGE_MODULE=$BC_WORK/torch/libbatchcast_model_stage.so BC_STAGE_ENCODER=$BC_WORK/models/enc.pt \
    "$BC_WORK/torch/torch_device_test" --gtest_filter='TorchDevice.ModelStageOnCudaOncePerProducerBatch' \
    --gtest_output=json:"$BC_WORK/data/model_stage.json" || fail "torch_device_test (model stage) failed"
  gtest_verdict "$BC_WORK/data/model_stage.json" TorchDevice.ModelStageOnCudaOncePerProducerBatch
}

serve_bg() {  # SOCKET ARGS...: batchcast serve in the background; waits for "listening"
  local sock=$1
  shift
  batchcast serve --socket "$sock" "$@" >"$BC_WORK/tmp/serve-$sock.log" 2>&1 &
  echo $! >"$BC_WORK/tmp/serve-$sock.pid"
  for _ in $(seq 1 300); do
    grep -q "listening on" "$BC_WORK/tmp/serve-$sock.log" && return 0
    kill -0 "$(cat "$BC_WORK/tmp/serve-$sock.pid")" 2>/dev/null || break
    sleep 0.1
  done
  cat "$BC_WORK/tmp/serve-$sock.log"
  fail "batchcast serve $* did not start"
}

serve_wait() {  # SOCK: the service ends with its stream; its exit status (killed after 30 s)
  local pid i
  pid=$(cat "$BC_WORK/tmp/serve-$1.pid")
  for i in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"; wait "$pid"
    fail "batchcast serve did not end 30 s after its stream (killed)"
  fi
  wait "$pid"
}

item_python_trainer() {  # Python 3.12 + torch 2.11 consuming device batches (ctypes shim)
  local set sock=bc-device-py-$$
  photos 96 64 48
  serve_bg "$sock" --dataset="$set" --epochs=2 --batch_size=8 --producer_batch=16 --gpu=on \
    --image_size=32 --seed=3
  grep "gpu:" "$BC_WORK/tmp/serve-$sock.log"
  BATCHCAST_DEBUG=WARN "$BC_PY" "$BC_REPO/device/python/device_trainer.py" --shim "$BC_W/lib/libbc_device_shim.so" \
    --address "$sock" --epochs 2 --batch-size 8 --samples 96 --json "$BC_WORK/data/python_trainer.json" ||
    fail "the Python trainer failed"
  serve_wait "$sock" || fail "batchcast serve exited $?: $(tail -n 3 "$BC_WORK/tmp/serve-$sock.log")"
  echo "OK: $(cut -c1-300 "$BC_WORK/data/python_trainer.json")"
}

item_train_many_gpu() {  # two TorchScript models on cuda in one train-many process
  need_torch_build
  local set sock=bc-device-tm-$$
  photos 96 64 48
  "$BC_PY" "$BC_REPO/device/python/make_models.py" "$BC_WORK/models" >/dev/null || fail "making the TorchScript models failed"
  serve_bg "$sock" --dataset="$set" --epochs=2 --batch_size=16 --producer_batch=16 --image_size=32 \
    --seed=5
  "$BC_PY" - "$BC_WORK/models" "$BC_WORK/tmp/train_many.json" <<'PY' || fail "writing the train-many configuration failed"
import json, sys
models, out = sys.argv[1], sys.argv[2]
json.dump({"policy": "concurrent", "output_dir": models + "/runs",
           "models": [{"name": "a", "model": models + "/cls_cuda_a.pt", "lr": 0.01,
                       "batch_size": 16, "epochs": 2},
                      {"name": "b", "model": models + "/cls_cuda_b.pt", "lr": 0.01,
                       "batch_size": 8, "epochs": 2}]},
          open(out, "w"))
PY
  timeout -k 5 120 "$BC_WORK/torch/batchcast-train-many" "$BC_WORK/tmp/train_many.json" \
    --address="$sock" >"$BC_WORK/tmp/train_many.out" 2>&1
  local rc=$?
  cat "$BC_WORK/tmp/train_many.out"
  [ "$rc" -eq 0 ] || { kill "$(cat "$BC_WORK/tmp/serve-$sock.pid")" 2>/dev/null
                       fail "batchcast-train-many exited $rc: $(tail -n 3 "$BC_WORK/tmp/train_many.out")"; }
  serve_wait "$sock" || fail "batchcast serve exited $?: $(tail -n 3 "$BC_WORK/tmp/serve-$sock.log")"
  echo "OK: two models trained on cuda in one process: $(tail -n 1 "$BC_WORK/tmp/train_many.out" | cut -c1-200)"
}
