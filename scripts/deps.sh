#!/usr/bin/env bash
# Installs every Debian package Batchcast needs to build, test, benchmark and demo.
# Idempotent: when all packages are present it does not touch apt at all. (`make deps` then
# makes the torch 2.x venv of the second PyTorch generation: scripts/torch2_venv.sh.)
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git gfortran ccache
  openmpi-bin libopenmpi-dev libucx-dev libpmix-dev
  libhdf5-dev hdf5-tools hdf5-filter-plugin
  libturbojpeg0-dev libjpeg62-turbo-dev libjpeg-turbo-progs libspng-dev zlib1g-dev libxxhash-dev
  libopencv-core-dev libopencv-imgproc-dev
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libdlpack-dev pybind11-dev python3-dev python3-numpy python3-h5py python3-pytest
  python3-matplotlib python3-mpi4py python3-pil
  python3-venv python3-pip python3-setuptools python3-wheel python3-build
  libtorch-dev python3-torch
  dataset-fashion-mnist python3-skimage
  iproute2 procps util-linux
  clang libclang-rt-14-dev stress-ng   # make fuzz (libFuzzer), make test-repeat LOAD=1
  chromium   # e2e_report_browser: the report page rendered in headless Chromium
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "deps: installing ${#missing[@]} missing packages: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" \
  >/tmp/batchcast-apt.log 2>&1 || { tail -n 40 /tmp/batchcast-apt.log; echo "deps: apt-get install failed (full log: /tmp/batchcast-apt.log)"; exit 1; }
echo "deps: done"
