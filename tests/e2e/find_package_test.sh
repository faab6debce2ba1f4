#!/usr/bin/env bash
# Installs Batchcast into a clean temporary prefix and builds against the installed package
# only, as a user would (docs/api.md "Building against Batchcast"):
#   1. a C++ trainer (the MPI Runtime) from project(x CXX) with find_package(Batchcast CONFIG)
#   2. the C example trainer (examples/c/c_trainer.c) from project(x C) with find_package
#   3. the same C file built with `cc $(pkg-config --cflags --libs batchcast)` alone
# and runs each under mpirun: every rank must get every sample exactly once; then
#   4. a Fortran 2008 consumer (examples/fortran) built with pkg-config, exactly once too;
#   5. (only with the argument `torch`) the LibTorch trainer of docs/api.md ("A LibTorch
#      trainer"), its CMakeLists.txt and torch_trainer.cc taken from that page as they stand,
#      against Batchcast::torch and the LibTorch of $BCTEST_TORCH_PREFIX (a pip wheel's
#      torch.utils.cmake_prefix_path; unset: the one CMake finds, Debian's).
# Usage: find_package_test.sh BUILD_DIR SOURCE_DIR MAKE_PHOTO_DATASET MPIEXEC [torch]
# (torch: step 5 only, as the `torch`-labelled e2e_find_package_torch runs it in both
# PyTorch generations' trees; it fails when the tree was built without LibTorch.)
set -euo pipefail
build=$1 src=$2 makeset=$3 mpiexec=$4 only=${5:-all}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libbatchcast.so' | head -1)")
export LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}"
"$makeset" "$tmp/photos.h5" --images 48 --width 32 --height 24 >/dev/null

mpirun_n() {  # N PROGRAM ARGS...: under a timeout, output kept for the checks
  local n=$1
  shift
  timeout -k 5 120 "$mpiexec" --oversubscribe --bind-to none -n "$n" "$@" 2>&1
}

if [ "$only" != torch ]; then
# --- 1. C++ from project(x CXX): the MPI Runtime; each trainer counts the sample ids ---
mkdir -p "$tmp/cxx"
cat > "$tmp/cxx/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(trainer LANGUAGES CXX)
find_package(Batchcast CONFIG REQUIRED)
add_executable(trainer main.cc)
target_link_libraries(trainer PRIVATE Batchcast::batchcast)
CMAKE
cat > "$tmp/cxx/main.cc" <<'CC'
#include <batchcast/batchcast.h>
#include <batchcast/runtime.h>
#include <cstdio>
#include <vector>
int main(int argc, char** argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  static_assert(BATCHCAST_VERSION_CODE > 0);
  if (batchcast::VersionCode() != BATCHCAST_VERSION_CODE) return 3;
  auto bad = batchcast::ResolveOptions({"--batch-size=zero"});
  auto opts = batchcast::ResolveOptions({argv + 1, argv + argc}).value();
  auto rt = batchcast::Runtime::Create(opts).value();
  int rc = 0;
  if (rt->is_trainer()) {
    std::vector<int> seen(48, 0);
    for (batchcast::Batch& b : rt->consumer())
      for (int64_t i = 0; i < b.size(); ++i) seen[b.sample_ids()[i]]++;
    for (int n : seen) rc |= n == 1 ? 0 : 1;
    std::printf("cxx trainer %d: bad=%s exactly-once=%s\n", rt->local_rank(),
                bad.ok() ? "accepted" : "refused", rc == 0 ? "yes" : "no");
  }
  if (!rt->Finalize().ok()) rc = 1;
  MPI_Finalize();
  return rc;
}
CC
cmake -S "$tmp/cxx" -B "$tmp/cxx/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/cxx/build" >/dev/null
out=$(mpirun_n 3 "$tmp/cxx/build/trainer" --dataset "$tmp/photos.h5" --batch-size 8 \
      --image-size 16 --threads 1 --seed 3)
echo "$out"
[ "$(grep -c 'bad=refused exactly-once=yes' <<<"$out")" -eq 2 ] || { echo "FAIL: C++ trainers"; exit 1; }

# --- 2. C from project(x C), find_package ---
mkdir -p "$tmp/c"
cp "$src/examples/c/c_trainer.c" "$tmp/c/"
cat > "$tmp/c/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(c_trainer LANGUAGES C)
find_package(Batchcast CONFIG REQUIRED)
add_executable(c_trainer c_trainer.c)
target_link_libraries(c_trainer PRIVATE Batchcast::batchcast MPI::MPI_C)
CMAKE
cmake -S "$tmp/c" -B "$tmp/c/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/c/build" >/dev/null
check_c() {  # OUTPUT RANKS
  echo "$1"
  [ "$(grep -c ': OK$' <<<"$1")" -eq "$2" ] || { echo "FAIL: C trainer ($3)"; exit 1; }
}
check_c "$(mpirun_n 2 "$tmp/c/build/c_trainer" "$tmp/photos.h5" 48 1 8)" 2 "find_package"

# --- 3. C with pkg-config only ---
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
cc -std=c99 -o "$tmp/c_trainer_pc" "$src/examples/c/c_trainer.c" $(pkg-config --cflags --libs batchcast)
out=$(mpirun_n 2 "$tmp/c_trainer_pc" "$tmp/photos.h5" 48 1 8)
check_c "$out" 2 "pkg-config"
# The .pc file's version is the library's (bc_get_version, printed by the trainer).
grep -q "batchcast $(pkg-config --modversion batchcast)," <<<"$out" || {
  echo "FAIL: pkg-config --modversion $(pkg-config --modversion batchcast) is not the library's"; exit 1; }

# --- 4. Fortran 2008 (iso_c_binding) with pkg-config only: examples/fortran/consumer.f90 ---
# shellcheck disable=SC2046
gfortran -std=f2008 -J "$tmp" -o "$tmp/fortran_consumer" "$src/examples/fortran/consumer.f90" \
  $(pkg-config --libs batchcast)
out=$("$tmp/fortran_consumer" "$tmp/photos.h5" 48)
echo "$out"
grep -q "48 samples exactly once: OK" <<<"$out" || { echo "FAIL: Fortran consumer"; exit 1; }

fi

# --- 5. the LibTorch trainer exactly as docs/api.md shows it ---
if [ "$only" = torch ] && [ ! -f "$libdir/cmake/Batchcast/BatchcastTorchTargets.cmake" ]; then
  echo "FAIL: $build was built without LibTorch: no BatchcastTorchTargets.cmake installed"; exit 1
fi
if [ "$only" = torch ]; then
  mkdir -p "$tmp/torch"
  # The fenced block after each `<!-- libtorch-trainer: FILE -->` line, verbatim.
  for f in CMakeLists.txt torch_trainer.cc; do
    awk -v want="<!-- libtorch-trainer: $f -->" '
      $0 == want { armed = 1; next }
      armed && /^```/ { if (inside) exit; inside = 1; next }
      inside { print }' "$src/docs/api.md" >"$tmp/torch/$f"
    [ -s "$tmp/torch/$f" ] || { echo "FAIL: docs/api.md has no block for $f"; exit 1; }
  done
  # A pip wheel's LibTorch needs the NCCL of its own wheel (2.30 for torch 2.15), newer than
  # the one of this machine's CUDA toolkit (/usr/local/cuda, 2.28), which the wheel's
  # TorchConfig puts on every link line's rpath: any LibTorch program, with or without
  # Batchcast, then fails to link (undefined ncclCommGrow, ...). As docs/api.md says, such a
  # machine gives the wheel's NCCL first at link and run time. (Nothing to do with Debian's
  # CPU-only LibTorch.)
  IFS=';' read -r -a torch_dirs <<<"${BCTEST_TORCH_PREFIX:-}"
  for d in "${torch_dirs[@]}"; do
    if [ -d "$d/../nvidia/nccl/lib" ]; then
      nccl_dir=$(cd "$d/../nvidia/nccl/lib" && pwd)
      export LDFLAGS="-Wl,-rpath-link,$nccl_dir" LD_LIBRARY_PATH="$nccl_dir:$LD_LIBRARY_PATH"
    fi
  done
  cmake -S "$tmp/torch" -B "$tmp/torch/build" \
    -DCMAKE_PREFIX_PATH="$prefix${BCTEST_TORCH_PREFIX:+;$BCTEST_TORCH_PREFIX}" >"$tmp/torch.log" 2>&1 &&
    cmake --build "$tmp/torch/build" >>"$tmp/torch.log" 2>&1 ||
    { cat "$tmp/torch.log"; echo "FAIL: the LibTorch trainer of docs/api.md does not build"; exit 1; }
  out=$(mpirun_n 3 "$tmp/torch/build/torch_trainer" --dataset="$tmp/photos.h5" --batch-size=8 \
        --image-size=16 --threads=1 --epochs=2 --seed=3)
  echo "$out"
  [ "$(grep -c 'samples, last loss' <<<"$out")" -eq 2 ] &&
    [ "$(grep -c ': 96 samples, last loss' <<<"$out")" -eq 2 ] ||
    { echo "FAIL: LibTorch trainers (2 trainers, 2 epochs of 48 samples each)"; exit 1; }
fi

# Only the public API is exported from the shared library.
if nm -D --defined-only "$libdir/libbatchcast.so" | c++filt | grep -q 'batchcast::shm::'; then
  echo "libbatchcast.so exports internal symbols"; exit 1
fi
echo "find_package test: PASS"
