#!/usr/bin/env bash
# Runs the whole test suite with ctest. Usage: scripts/test.sh BUILD_DIR [ctest args...]
set -euo pipefail
build=${1:-build}; shift || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
cd "$build"
ctest --output-on-failure --timeout 600 -j "${CTEST_JOBS:-2}" "$@"
