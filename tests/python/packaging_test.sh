#!/usr/bin/env bash
# The Python packaging paths as users type them (issue 30), label `slow`:
#   1. pip install CLONE              a fresh clone of this commit, a fresh venv, build
#                                     isolation (setuptools, wheel, pybind11 >= 2.12 and the
#                                     numpy dependency come from PyPI: numpy 2)
#   2. python -m build --wheel CLONE  in another fresh venv; then the clone is removed and
#                                     the wheel installed into a third fresh venv
#   3. cmake --install BUILD --component python --prefix P   (P/lib/python3.X/..., no /local)
# Each installation is imported from outside any source tree, its version checked, and a
# Leader streams 64 Fashion-MNIST samples to a Consumer (output="numpy": the venvs have no torch).
# The pip builds run without CI in the environment, as a user's: no -Werror.
# Usage: packaging_test.sh SOURCE_DIR BUILD_DIR PYTHON
# (The clone is of the commit checked out in SOURCE_DIR: uncommitted changes are not in it.)
set -euo pipefail
src=$1 build=$2 python=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
v() { sed -n "s/^#define BATCHCAST_VERSION_$1 \([0-9]*\)$/\1/p" "$src/runtime/include/batchcast/version.h"; }
version=$(v MAJOR).$(v MINOR).$(v PATCH)
export PIP_DISABLE_PIP_VERSION_CHECK=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
unset CI PY_BATCHCAST_BUILD_DIR CMAKE_ARGS PYTHONPATH
bash "$src/scripts/fashion_mnist.sh" "$build/data" "$build/bin/batchcast" >/dev/null
h5=$build/data/fashion-mnist-test.h5
step() { echo "packaging: $* (${SECONDS}s)"; }
# Runs a command quietly; on failure prints the end of its output.
quiet() {
  local log=$tmp/step.log
  "$@" >"$log" 2>&1 || { tail -n 60 "$log"; echo "packaging: FAILED: $*"; exit 1; }
}

# Imports batchcast with `py` from outside any source tree; checks version and location, then
# a real job through the extension.
check() {
  local py=$1 where=$2
  (cd "$tmp" && "$py" - "$version" "$where" "$h5" <<'PY'
import importlib.util, sys
import numpy as np
import batchcast
assert importlib.util.find_spec("batchcast.torch")  # present (importing it imports torch)
version, where, h5 = sys.argv[1:]
assert batchcast.__version__ == version, (batchcast.__version__, version)
assert batchcast.__file__.startswith(where), (batchcast.__file__, where)
assert '"batch_size"' in batchcast.resolve_options(batch_size=8)
leader = batchcast.Leader(h5, consumers=1, epochs=1, batch_size=16, limit_samples=64)
loader = batchcast.Consumer(leader.address, batch_size=16, output="numpy")
labels = [l.copy() for _, l in loader]
assert leader.wait(120)
assert sum(len(l) for l in labels) == 64 and labels[0].dtype == np.int64, labels
print("ok", batchcast.__version__, "numpy", np.__version__, batchcast.__file__)
PY
  )
}

git -C "$src" diff --quiet HEAD -- 2>/dev/null ||
  echo "packaging: note: $src has uncommitted changes; the clone tests its HEAD commit"
quiet git clone -q --no-hardlinks "$src" "$tmp/clone"
quiet git -C "$tmp/clone" checkout -q "$(git -C "$src" rev-parse HEAD)"

# --- 1. pip install CLONE into a fresh venv (build isolation) ---
"$python" -m venv "$tmp/venv1"
quiet "$tmp/venv1/bin/python" -m pip install "$tmp/clone"
check "$tmp/venv1/bin/python" "$tmp/venv1/lib/"
step "pip install of a fresh clone into a fresh venv"

# --- 2. python -m build --wheel, the clone removed, the wheel into a fresh venv ---
"$python" -m venv "$tmp/venv-build"
quiet "$tmp/venv-build/bin/python" -m pip install build==1.6.1
quiet "$tmp/venv-build/bin/python" -m build --wheel --outdir "$tmp/dist" "$tmp/clone"
wheel=$(ls "$tmp"/dist/batchcast-"$version"-*.whl)
rm -rf "$tmp/clone"
"$python" -m venv "$tmp/venv2"
quiet "$tmp/venv2/bin/python" -m pip install "$wheel"
check "$tmp/venv2/bin/python" "$tmp/venv2/lib/"
"$python" -m zipfile -l "$wheel" | sed 's/^/  wheel: /' | head -20
step "python -m build --wheel, installed into a fresh venv without the clone"

# --- 3. cmake --install of the build tree ---
cmake --install "$build" --component python --prefix "$tmp/prefix" >/dev/null
site=$("$python" "$src/bindings/python/site_dir.py")
test -f "$tmp/prefix/$site/batchcast/__init__.py" ||
  { echo "cmake --install --prefix: no package under $tmp/prefix/$site"; find "$tmp/prefix"; exit 1; }
if [ -e "$tmp/prefix/local" ]; then echo "cmake --install --prefix: wrote under prefix/local"; exit 1; fi
PYTHONPATH="$tmp/prefix/$site" check "$python" "$tmp/prefix/$site"
step "pip, wheel and cmake --install all import batchcast $version and stream"
