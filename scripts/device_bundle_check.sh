#!/usr/bin/env bash
# Runs the GPU proof bundle here, in a root stripped of what the GPU machine lacks
# (make device-bundle-check; docs/gpu.md "The self-test here").
#   scripts/device_bundle_check.sh BUILD_DIR [BUNDLE_DIR]
# The root (BUILD_DIR/device-root, made once) holds only Debian's base system, the C/C++
# toolchain and Python's own libraries: no -dev package of ours, none of our runtime
# libraries (HDF5, Open MPI, PMIx, libjpeg-turbo, libspng, OpenCV, fmt, xxhash, ...), no
# /usr/local/cuda, no driver. It runs in its own mount and PID namespace (unshare), read-only
# except /tmp and the venv, with PATH and LD_LIBRARY_PATH scrubbed. The GPU machine's Python
# (3.12 with numpy 2, pybind11, cmake, ninja and torch 2.11) is simulated by a venv at
# /opt/torch/.venv made from PyPI wheels: pyenv's 3.12 when this machine has one (else
# Debian's 3.11), and torch 2.11.0's wheel unpacked without its CUDA libraries (its C++
# headers and libraries, for the compiles; `import torch` is not possible here).
# Every CPU-side item must pass and every device item must skip with "no CUDA device".
# CHECK_TORCH=0 leaves the torch wheel out (its compiles then skip, saying so).
set -euo pipefail
build=${1:?usage: device_bundle_check.sh BUILD_DIR [BUNDLE_DIR]}
root_dir=$(cd "$(dirname "$0")/.." && pwd)
bundle=${2:-$root_dir/device/bundle}
build=$(cd "$build" && pwd)
bundle=$(cd "$bundle" && pwd)
torch_version=${TORCH_VERSION:-2.11.0}
check_torch=${CHECK_TORCH:-1}
[ -f "$bundle/payload.tar.xz" ] || { echo "device_bundle_check: no bundle in $bundle; run make device-bundle" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "device_bundle_check: needs root (unshare, mounts)" >&2; exit 1; }
t0=$(date +%s)

# --- the stripped root: Debian's base, the toolchain, Python's libraries ------------------
base=(bash dash coreutils gcc g++ cpp grep sed mawk findutils diffutils tar xz-utils gzip util-linux procps
      libc-bin libc6 libgcc-s1 libstdc++6 zlib1g binutils gcc-12 g++-12 cpp-12 libc6-dev
      libstdc++-12-dev libgcc-12-dev linux-libc-dev make
      libssl3 libffi8 libexpat1 libbz2-1.0 liblzma5 libsqlite3-0 libncursesw6 libreadline8
      libuuid1 libmpdec3 python3.11-minimal libpython3.11-minimal libpython3.11-stdlib python3.11)
forbidden='^(libhdf5|libopenmpi|openmpi|libpmix|libhwloc|libevent|libucx|libfabric|libturbojpeg|libjpeg62|libspng|libopencv|libfmt|libxxhash|libtbb|nvidia|cuda|libcuda|libnccl|libtorch|libgtest)'
root=$build/device-root
if [ ! -f "$root/.complete" ]; then
  echo "device_bundle_check: making the stripped root $root"
  rm -rf "$root"
  mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,tmp,proc,sys,dev,opt/torch/.venv,repo,out,root}
  mkdir -p "$root/usr/lib/python3"  # writable there (run.sh places the benchmark photos)
  ln -s usr/bin "$root/bin"; ln -s usr/sbin "$root/sbin"; ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
  # The dependency closure of the base packages (installed ones), then their files.
  declare -A seen=()
  queue=("${base[@]}")
  while [ ${#queue[@]} -gt 0 ]; do
    pkg=${queue[0]}; queue=("${queue[@]:1}")
    pkg=${pkg%%:*}
    [ -n "${seen[$pkg]:-}" ] && continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || continue
    seen[$pkg]=1
    deps=$(dpkg-query -W -f='${Depends}, ${Pre-Depends}' "$pkg" | tr ',' '\n' |
           sed 's/|.*//; s/(.*//; s/ //g' | grep -v '^$' || true)
    for d in $deps; do queue+=("$d"); done
  done
  bad=$(printf '%s\n' "${!seen[@]}" | grep -E "$forbidden" || true)
  [ -z "$bad" ] || { echo "device_bundle_check: the base pulls forbidden packages: $bad" >&2; exit 1; }
  for pkg in "${!seen[@]}"; do
    dpkg -L "$pkg" 2>/dev/null | while read -r f; do
      [ -f "$f" ] || [ -L "$f" ] || continue
      case "$f" in /usr/share/doc/*|/usr/share/man/*|/usr/share/locale/*|/usr/share/info/*) continue ;; esac
      cp -a --parents "$f" "$root/" 2>/dev/null || true
    done
  done
  printf '%s\n' "${!seen[@]}" | sort >"$root/.packages"
  echo "root:x:0:0:root:/root:/bin/bash" >"$root/etc/passwd"
  echo "root:x:0:" >"$root/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
  echo "$(hostname)" >"$root/etc/hostname"
  ldconfig -r "$root" 2>/dev/null || true
  touch "$root/.complete"
fi

# --- the GPU machine's Python, simulated: a venv from PyPI wheels --------------------------
sim=$build/device-sim
wheels=$sim/wheels
py=$(ls -d /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1 || true)
py_home=""
if [ -n "$py" ]; then py_home=$(cd "$(dirname "$py")/.." && pwd); else py=/usr/bin/python3.11; fi
pyver=$("$py" -c 'import sys;print("%d.%d" % sys.version_info[:2])')
mkdir -p "$wheels" "$sim/venv"
need=(numpy pybind11 cmake ninja)
[ "$check_torch" = 1 ] && need+=("torch==$torch_version")
for w in "${need[@]}"; do
  name=${w%%=*}
  ls "$wheels/${name}-"*.whl >/dev/null 2>&1 && continue
  echo "device_bundle_check: downloading $w for Python $pyver"
  "$py" -m pip download -q --no-deps --only-binary=:all: -d "$wheels" "$w"
done

run_root() {  # COMMAND...: runs in the stripped root (own mount and PID namespace)
  unshare --mount --pid --fork --propagation private bash -c '
    set -e
    r=$1 repo=$2 venv=$3 out=$4 pyhome=$5; shift 5
    mount --bind "$r" "$r"
    mount --bind "$repo" "$r/repo"
    mount --bind "$venv" "$r/opt/torch/.venv"
    mount --bind "$out" "$r/out"
    mount -t tmpfs -o size=4g tmpfs "$r/tmp"
    mount -t tmpfs tmpfs "$r/root"
    mount -t tmpfs tmpfs "$r/usr/lib/python3"
    mount -t proc proc "$r/proc"
    mount --rbind /sys "$r/sys"
    mount --rbind /dev "$r/dev"
    if [ -n "$pyhome" ]; then mkdir -p "$r$pyhome"; mount --bind "$pyhome" "$r$pyhome"
      mount -o remount,ro,bind "$r$pyhome"; fi
    mount -o remount,ro,bind "$r/repo"
    mount -o remount,ro,bind "$r"
    exec chroot "$r" /usr/bin/env -i PATH=/opt/torch/.venv/bin:/usr/local/bin:/usr/bin:/bin \
      HOME=/root TMPDIR=/tmp LANG=C.UTF-8 "$@"
  ' _ "$root" "$root_dir" "$sim/venv" "$sim/out" "$py_home" "$@"
}
mkdir -p "$sim/out"
if [ ! -f "$sim/venv/.complete" ] || [ "$(cat "$sim/venv/.complete")" != "$py $check_torch" ]; then
  echo "device_bundle_check: making the venv (Python $pyver)"
  find "$sim/venv" -mindepth 1 -delete
  rm -rf "$sim/out"/*
  cp "$wheels"/{numpy,pybind11,cmake,ninja}-*.whl "$sim/out/"
  run_root /bin/bash -c "$py -m venv /opt/torch/.venv &&
    /opt/torch/.venv/bin/python -m pip install -q --no-index --no-deps /out/*.whl"
  rm -f "$sim/out"/*.whl
  if [ "$check_torch" = 1 ]; then
    site=$(ls -d "$sim/venv"/lib/python*/site-packages)
    echo "device_bundle_check: unpacking torch $torch_version (headers and libraries, no CUDA libraries)"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      "$(ls "$wheels"/torch-*.whl | head -1)" "$site"
  fi
  echo "$py $check_torch" >"$sim/venv/.complete"
fi
t1=$(date +%s)

# BC_CHECK_SHELL='COMMAND': run COMMAND in the stripped root instead (a debugging aid; the
# bundle is unpacked to /tmp/bc-device by `bash /repo/device/run.sh` first, or by hand).
if [ -n "${BC_CHECK_SHELL:-}" ]; then
  run_root /bin/bash -c "$BC_CHECK_SHELL"
  exit $?
fi

# --- the run ------------------------------------------------------------------------------
rm -rf "$sim/out"/*
echo "device_bundle_check: running device/run.sh in the stripped root ($(wc -l <"$root/.packages") Debian packages, Python $pyver)"
set +e
# 2 cores here, 16 there: the torch compiles get longer limits (the estimates stay the GPU
# machine's; the device items skip anyway).
run_root /bin/bash -c "cd /repo && OUT=/out BC_DEVICE_WORK=/tmp/bc-device BC_DEVICE_BUDGET=2400 \
  BC_TORCH_BUILD_LIMIT=1500 bash device/run.sh" \
  | tee "$sim/run.log"
rc=${PIPESTATUS[0]}
set -e
t2=$(date +%s)
[ "$rc" -eq 0 ] || { echo "device_bundle_check: run.sh exited $rc (it must exit 0)"; exit 1; }
python3 - "$sim/out/device-proof.jsonl" "$check_torch" <<'PY'
import json, sys
path, torch = sys.argv[1], sys.argv[2] == "1"
items = [json.loads(l) for l in open(path) if l.strip()]
summary = [i for i in items if i.get("item") == "summary"]
items = [i for i in items if i.get("item") != "summary"]
bad = []
for i in items:
    if i["kind"] == "device":
        if i["status"] != "skip" or "no CUDA device" not in i.get("reason", ""):
            bad.append(f"{i['item']}: a device item must skip with 'no CUDA device', got {i}")
    elif i["status"] != "pass":
        if not torch and i["status"] == "skip" and "torch" in i.get("reason", ""):
            continue
        bad.append(f"{i['item']}: a CPU-side item must pass, got {i}")
if not summary:
    bad.append("no summary line")
for b in bad:
    print("FAIL", b)
print(f"device_bundle_check: {len(items)} items, {len(bad)} wrong")
sys.exit(1 if bad else 0)
PY
echo "device_bundle_check: PASS (setup $((t1 - t0)) s, run $((t2 - t1)) s)"
