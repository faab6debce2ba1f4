#!/usr/bin/env bash
# The second PyTorch generation of the test suite (docs/python.md "Supported versions"): a
# virtual environment with today's torch and numpy from PyPI, beside Debian's torch 1.13.1 and
# numpy 1.24. `make deps` creates it once and reuses it; a change of the pins below makes a new
# one (the directory name carries a hash of them).
#   scripts/torch2_venv.sh           create it when missing, print nothing else but progress
#   scripts/torch2_venv.sh --path    print the directory (whether it exists or not)
# Where: $BATCHCAST_VENV_ROOT (default ~/.cache/batchcast), outside the clone, so a fresh clone
# on the same machine (CI) finds it. PyPI's Linux torch wheels are CUDA builds: they pull the
# CUDA 13 runtime wheels (cuBLAS, cuDNN, NCCL, ...), about 3.5 GB to download and 5.5 GB on
# disk; pip needs about 2 minutes here. Nothing of it needs a GPU to run.
set -euo pipefail

# The versions the suite tests (keep docs/python.md in step).
PINS=(
  torch==2.15.0
  numpy==2.4.6
  pybind11==3.1.0   # the extension for numpy 2 needs pybind11 >= 2.12 (Debian has 2.10)
  h5py==3.16.0
  pillow==13.0.0
  pytest==9.2.0
)
python=${BATCHCAST_VENV_PYTHON:-/usr/bin/python3}
root=${BATCHCAST_VENV_ROOT:-${HOME:-/root}/.cache/batchcast}
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
hash=$(printf '%s\n' "$pyver" "${PINS[@]}" | sha256sum | cut -c1-10)
venv=$root/torch2-py$pyver-$hash

if [ "${1:-}" = --path ]; then
  echo "$venv"
  exit 0
fi
mkdir -p "$root"
# One creator at a time: `make test` starts this in the background while the main tree builds,
# and the torch 2 tree's build calls it again; the second waits here for the first and then
# finds the venv complete.
exec 9>"$venv.lock"
flock 9
if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
  echo "torch2 venv: $venv (present)"
  exit 0
fi
echo "torch2 venv: creating $venv (${PINS[*]}; about 3.5 GB from PyPI)"
rm -rf "$venv"
"$python" -m venv "$venv"
start=$SECONDS
# --no-compile: pip would byte-compile the wheels' ~7,000 .py files, CPU that make test's
# builds need (the venv is made beside the main build); Python compiles what it imports.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile "${PINS[@]}" ||
  { echo "torch2 venv: pip install failed; remove $venv and run make deps again" >&2; exit 1; }
"$venv/bin/python" - <<'PY'
import numpy, pybind11, torch
print(f"torch2 venv: torch {torch.__version__}, numpy {numpy.__version__}, "
      f"pybind11 {pybind11.__version__}; LibTorch at {torch.utils.cmake_prefix_path}")
PY
touch "$venv/.complete"
echo "torch2 venv: done in $((SECONDS - start)) s"
