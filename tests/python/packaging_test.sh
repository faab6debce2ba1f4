#!/usr/bin/env bash
# The Python packaging paths (issue 16), each in a fresh virtual environment:
#   1. pip install --no-build-isolation <source>        (pyproject.toml -> setup.py -> CMake)
#   2. python3 -m build --no-isolation --wheel, then pip install of that wheel
#   3. cmake --install <build> --component python --prefix P   (P/lib/python3.X/..., no /local)
# The extension is built through the project's CMake against the already configured tree
# BUILD (PY_BATCHCAST_BUILD_DIR: only `_batchcast` is brought up to date, normally a no-op), so
# the test costs seconds, not a rebuild. Usage: packaging_test.sh SOURCE_DIR BUILD_DIR PYTHON
set -euo pipefail
src=$1 build=$2 python=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
v() { sed -n "s/^#define BATCHCAST_VERSION_$1 \([0-9]*\)$/\1/p" "$src/runtime/include/batchcast/version.h"; }
version=$(v MAJOR).$(v MINOR).$(v PATCH)
export PY_BATCHCAST_BUILD_DIR=$build PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}

# Imports batchcast with `py` from outside the source tree; checks version and location.
check() {
  local py=$1 where=$2
  (cd "$tmp" && "$py" - "$version" "$where" <<'PY'
import importlib.util, sys
import batchcast
assert importlib.util.find_spec("batchcast.torch")  # present (importing it imports torch)
version, where = sys.argv[1:]
assert batchcast.__version__ == version, (batchcast.__version__, version)
assert batchcast.__file__.startswith(where), (batchcast.__file__, where)
assert '"batch_size"' in batchcast.resolve_options(batch_size=8)
print("ok", batchcast.__version__, batchcast.__file__)
PY
  )
}

# Debian's pip, setuptools and wheel (and numpy) come from the system site-packages.
"$python" -m venv --system-site-packages --without-pip "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-deps "$src"
check "$tmp/venv/bin/python" "$tmp/venv/lib/"
echo "packaging: pip install into a venv: ${SECONDS}s"

(cd "$src" && "$python" -m build --no-isolation --wheel --outdir "$tmp/dist" >"$tmp/build.log" 2>&1) ||
  { tail -n 40 "$tmp/build.log"; exit 1; }
wheel=$(ls "$tmp"/dist/batchcast-"$version"-*.whl)
"$python" -m venv --system-site-packages --without-pip "$tmp/venv2"
"$tmp/venv2/bin/python" -m pip install -q --no-deps "$wheel"
check "$tmp/venv2/bin/python" "$tmp/venv2/lib/"
echo "packaging: + wheel with python3 -m build, installed into a venv: ${SECONDS}s"

cmake --install "$build" --component python --prefix "$tmp/prefix" >/dev/null
site=$("$python" "$src/bindings/python/site_dir.py")
test -f "$tmp/prefix/$site/batchcast/__init__.py" ||
  { echo "cmake --install --prefix: no package under $tmp/prefix/$site"; find "$tmp/prefix"; exit 1; }
if [ -e "$tmp/prefix/local" ]; then echo "cmake --install --prefix: wrote under prefix/local"; exit 1; fi
PYTHONPATH="$tmp/prefix/$site" check "$python" "$tmp/prefix/$site"
echo "packaging: pip, wheel and cmake --install all import batchcast $version (${SECONDS}s)"
