#!/usr/bin/env bash
# The second PyTorch generation's build tree (docs/testing.md, "Both PyTorch generations"):
# the same CMake project configured with the torch 2.x venv of scripts/torch2_venv.sh — its
# Python (numpy 2) for the extension, its pybind11, and the LibTorch inside its torch wheel —
# building only what the `torch`-labelled tests run (CMake target torch_tests: the Python
# package and the binaries its tests start, the LibTorch unit tests, the model stage,
# train-many, the demo trainer). With ccache (the Makefile's launcher) every module object
# is the main tree's; only the LibTorch and extension sources compile again.
#   scripts/torch2_tree.sh build BUILD_DIR          configure (once) and build torch_tests
#   scripts/torch2_tree.sh test BUILD_DIR [ctest args]   ctest -L torch in it
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:?usage: torch2_tree.sh build|test BUILD_DIR}
build=${2:?usage: torch2_tree.sh build|test BUILD_DIR}
shift 2
venv=$(bash "$here/scripts/torch2_venv.sh" --path)
py=$venv/bin/python
if [ "$cmd" = build ]; then
  # Creates the venv, or waits for the creation `make test` started in the background.
  bash "$here/scripts/torch2_venv.sh" || exit 1
elif [ ! -f "$venv/.complete" ]; then
  echo "torch2_tree: no torch 2 venv at $venv; run make deps (scripts/torch2_venv.sh)" >&2
  exit 1
fi

case $cmd in
  build)
    # The main tree's debug information (MAIN_BUILD's cache, or DEBUG_INFO), so that ccache
    # gives this tree the main tree's module objects: the same flags.
    debug_info=${DEBUG_INFO:-$(sed -n 's/^BATCHCAST_DEBUG_INFO:[A-Z]*=//p' \
                 "${MAIN_BUILD:-$here/build}/CMakeCache.txt" 2>/dev/null)}
    debug_info=${debug_info:-lines}
    if [ ! -f "$build/CMakeCache.txt" ]; then
      mkdir -p "$build"
      # The CMake package, and the package directory itself: LibTorch's TorchConfig finds its
      # libraries with plain find_library calls, which would take Debian's libtorch.so from
      # /usr/lib before the wheel's torch/lib unless that directory is a prefix too.
      torch_prefix=$("$py" -c 'import os, torch
print(torch.utils.cmake_prefix_path + ";" + os.path.dirname(torch.__file__))')
      pybind11_dir=$("$py" -m pybind11 --cmakedir)
      launcher=()
      if command -v ccache >/dev/null; then
        launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
      fi
      cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_UNITY_BUILD="${UNITY:-ON}" -DBATCHCAST_DEBUG_INFO="$debug_info" -DBATCHCAST_TORCH=ON -DBATCHCAST_PYTHON=ON -DBATCHCAST_WERROR=ON \
        -DBATCHCAST_BUILD_BENCHMARKS=OFF -DPython_EXECUTABLE="$py" \
        -DCMAKE_PREFIX_PATH="$torch_prefix" -Dpybind11_DIR="$pybind11_dir" \
        "${launcher[@]}" ${TORCH2_CMAKE_FLAGS:-} >"$build/configure.log" 2>&1 ||
        { cat "$build/configure.log"; echo "torch2_tree: configure of $build failed" >&2; exit 1; }
    fi
    cmake --build "$build" -j "${JOBS:-2}" --target torch_tests
    ;;
  test)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1
    "$py" -c 'import torch, numpy; print(f"torch2 tree: torch {torch.__version__}, numpy {numpy.__version__}")'
    cd "$build"
    ctest --output-on-failure --timeout 900 -j "${CTEST_JOBS:-2}" -L torch "$@"
    ;;
  *) echo "torch2_tree: unknown command '$cmd' (build or test)" >&2; exit 1 ;;
esac
