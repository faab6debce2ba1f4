#!/usr/bin/env bash
# Builds the GPU proof bundle (docs/gpu.md "Running the proof on the GPU machine").
#   scripts/device_bundle.sh BUILD_DIR [BUNDLE_DIR]      (make device-bundle)
# BUILD_DIR must be a CUDA build (BATCHCAST_CUDA not OFF, /usr/local/cuda present); the
# targets the proof needs are built there first. BUNDLE_DIR (default device/bundle, ignored
# by git) gets payload.tar.xz and MANIFEST.json; device/run.sh (tracked) unpacks and runs it.
# The payload holds what the GPU machine lacks and cannot build:
#   bin/          the test and benchmark programs, stripped
#   lib/          libbatchcast.so, the ctypes shim, every shared library they load that is
#                 not glibc or the NVIDIA driver (the ldd closure), stripped; dev symlinks
#   lib-fallback/ libstdc++ and libgcc_s, used only where the machine's own are older
#   archives/     the module archives (no debug info), to link what is compiled there
#                 against the machine's LibTorch (model stage, train-many, the torch tests)
#   include/      third-party headers those compiles need (fmt, json, dlpack, MPI, HDF5, gtest)
#   photos/       the benchmarks' source photos (python3-skimage's)
#   mpi/          Open MPI's runtime (mpirun, plugins, help files), relocated by OPAL_PREFIX
# Never carried: glibc, libcuda/libnvidia-* (the driver's), the CUDA runtime (linked
# statically) and NCCL (the machine's nvidia-nccl-cu13, found by run.sh).
set -euo pipefail
build=${1:?usage: device_bundle.sh BUILD_DIR [BUNDLE_DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${2:-$root/device/bundle}
build=$(cd "$build" && pwd)
jobs=${JOBS:-2}
max_mib=48
xz_level=${BUNDLE_XZ:-6}
[[ $xz_level =~ ^[0-9]$ ]] || {
  echo "device_bundle: BUNDLE_XZ=$xz_level is not an xz level (0 to 9; 6 for the device, 1 for" \
       "the quick check)" >&2; exit 2; }

grep -q 'BATCHCAST_HAVE_CUDA=1' "$build/runtime/CMakeFiles/bc_transport.dir/flags.make" 2>/dev/null || {
  echo "device_bundle: $build is not a CUDA build (needs nvcc and nccl.h, e.g. /usr/local/cuda);" \
       "configure it with -DBATCHCAST_CUDA=ON" >&2
  exit 1
}
targets=(unit_gpu bench_gpu bench_decode bench_fanout batchcast_cli batchcast capi_test
         make_photo_dataset mpi_dataplane bc_device_probe bc_device_shim)
echo "device_bundle: building ${targets[*]} in $build"
nice -n 5 cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$build/device-bundle-build.log" 2>&1 || {
  tail -n 40 "$build/device-bundle-build.log"; echo "device_bundle: build failed" >&2; exit 1; }

stage=$(mktemp -d "${TMPDIR:-/tmp}/bc-bundle-XXXXXX")
trap 'rm -rf "$stage"' EXIT
p=$stage/payload
mkdir -p "$p"/{bin,lib,lib-fallback,archives,include,photos}

# --- programs ------------------------------------------------------------------------
for f in tests/unit_gpu benchmarks/bench_gpu benchmarks/bench_decode benchmarks/bench_fanout \
         bin/batchcast tests/capi/capi_test tests/mpi/make_photo_dataset tests/mpi/mpi_dataplane \
         device/bc_device_probe; do
  install -m 755 "$build/$f" "$p/bin/$(basename "$f")"
done
lib=$(readlink -f "$build/runtime/libbatchcast.so")
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
install -m 755 "$lib" "$p/lib/$soname"
ln -s "$soname" "$p/lib/libbatchcast.so"
install -m 755 "$build/device/libbc_device_shim.so" "$p/lib/"

# --- shared libraries: the ldd closure, minus glibc and the driver ------------------------
is_system() {  # glibc's own libraries and the NVIDIA driver's: the machine has its own
  case "$1" in
    linux-vdso*|ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|\
    libutil.so.*|libanl.so.*|libnsl.so.*|libmvec.so.*|libcuda.so*|libnvidia-*|libcudart.so*|libnccl.so*)
      return 0 ;;
  esac
  return 1
}
collect() {  # ELF...: copy every library they need into lib/ (or lib-fallback/)
  local f name path
  for f in "$@"; do
    while read -r name path; do
      [ -n "$path" ] || continue
      is_system "$name" && continue
      case "$name" in
        libstdc++.so.*|libgcc_s.so.*) dest=$p/lib-fallback ;;
        *) dest=$p/lib ;;
      esac
      [ -e "$dest/$name" ] || { cp -L "$path" "$dest/$name"; chmod 755 "$dest/$name"; }
    done < <(LD_LIBRARY_PATH="$p/lib" ldd "$f" 2>/dev/null | awk '/=> \// {print $1, $3}')
  done
}

# --- Open MPI: mpirun, its plugins and help files (mpi_dataplane under mpirun) ------------
ompi_path() { ompi_info --path "$1" --parsable | sed 's/^path:[a-z]*://'; }
ompi_plugins=$(ompi_path pkglibdir)
ompi_prefix=$p/mpi
mkdir -p "$ompi_prefix/bin" "$ompi_prefix/lib" "$ompi_prefix/share" "$ompi_prefix/etc"
for b in orterun orted; do install -m 755 "$(readlink -f "$(command -v $b)")" "$ompi_prefix/bin/$b"; done
ln -s orterun "$ompi_prefix/bin/mpirun"
mkdir -p "$ompi_prefix/lib/openmpi3"
# The plugins a single-node run needs: no network fabrics (UCX, OFI, PSM, verbs), which
# would pull their libraries in; shared memory (vader) and TCP stay.
for f in "$ompi_plugins"/*; do
  case "$(basename "$f")" in
    *ucx*|*ofi*|*psm*|*openib*|*uct*|*verbs*|*hcoll*|*portals*|*fca*|*cuda*|*usnic*|*ugni*) ;;
    *) cp -a "$f" "$ompi_prefix/lib/openmpi3/" ;;
  esac
done
cp -a "$(ompi_path pkgdatadir)" "$ompi_prefix/share/openmpi"
cp -a "$(ompi_path sysconfdir)/." "$ompi_prefix/etc/"
pmix_plugins=$(dirname "$(readlink -f "$(ldconfig -p | awk '/libpmix.so.2 / {print $NF; exit}')")")/pmix2/lib/pmix
[ -d "$pmix_plugins" ] || pmix_plugins=$(ls -d /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix 2>/dev/null || true)
if [ -n "$pmix_plugins" ] && [ -d "$pmix_plugins" ]; then
  mkdir -p "$ompi_prefix/lib/pmix"; cp -a "$pmix_plugins/." "$ompi_prefix/lib/pmix/"
fi
[ -d /usr/share/pmix ] && cp -a /usr/share/pmix "$ompi_prefix/share/pmix"

collect "$p"/bin/* "$p"/lib/*.so* "$ompi_prefix"/bin/orte* \
        $(find "$ompi_prefix/lib" -name '*.so' -type f)
collect "$p"/lib/*.so*  # what the copied libraries need in turn
collect "$p"/lib/*.so*

# --- what is compiled there against the machine's LibTorch ------------------------------
for m in core data pipeline telemetry schedule transport producer gpu node multimodel; do
  a=$build/runtime/libbc_$m.a
  [ -f "$a" ] && cp "$a" "$p/archives/"
done
cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a "$p/archives/"
for h in fmt nlohmann dlpack gtest; do cp -a "/usr/include/$h" "$p/include/"; done
cp -a /usr/include/hdf5/serial "$p/include/hdf5"
cp -a "$(dirname "$(find /usr/lib/x86_64-linux-gnu/openmpi/include -name mpi.h | head -1)")" "$p/include/mpi"
# CUDA's static runtime for the torch test binaries (they link the archives' CUDA code).
cudadir=$(sed -n 's/^CUDAToolkit_LIBRARY_DIR:PATH=//p' "$build/CMakeCache.txt")
[ -n "$cudadir" ] || cudadir=/usr/local/cuda/lib64
cp "$cudadir/libcudart_static.a" "$p/archives/"

# The benchmarks' source photos (python3-skimage's; bench_decode and photo_set.h read them).
mkdir -p "$p/photos"
for f in astronaut.png chelsea.png coffee.png motorcycle_left.png motorcycle_right.png ihc.png \
         rocket.jpg retina.jpg hubble_deep_field.jpg; do
  cp /usr/lib/python3/dist-packages/skimage/data/$f "$p/photos/"
done

# Dev symlinks so the compiles there can say -lhdf5_serial, -lfmt, ...
( cd "$p/lib" && for f in *.so.*; do
    base=${f%%.so.*}.so
    [ -e "$base" ] || ln -s "$f" "$base"
  done )

# --- strip, pack, check the size ---------------------------------------------------------
find "$p/bin" "$p/lib" "$p/lib-fallback" "$ompi_prefix" -type f \( -name '*.so*' -o -perm -u+x \) \
  -exec sh -c 'file -b "$1" | grep -q ELF && strip --strip-unneeded "$1" 2>/dev/null || true' _ {} \;
strip -g "$p"/archives/libbc_*.a
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain 2>/dev/null | grep -q . && echo "+changes" || true)
raw=$(du -sm "$p" | cut -f1)
rm -rf "$bundle"
mkdir -p "$bundle"
tar -C "$stage" -cf - payload | xz -T"$jobs" -"$xz_level" >"$bundle/payload.tar.xz"
mib=$(( ($(stat -c %s "$bundle/payload.tar.xz") + 1048575) / 1048576 ))
python3 - "$bundle/MANIFEST.json" "$commit$dirty" "$raw" "$mib" "$p" <<'PY'
import json, os, sys
out, commit, raw, mib, p = sys.argv[1:6]
files = sorted(os.path.relpath(os.path.join(d, f), p) for d, _, fs in os.walk(p) for f in fs)
json.dump({"commit": commit, "raw_mib": int(raw), "packed_mib": int(mib),
           "files": len(files), "bin": sorted(os.listdir(os.path.join(p, "bin"))),
           "lib": sorted(os.listdir(os.path.join(p, "lib")))}, open(out, "w"), indent=1)
PY
echo "device_bundle: $bundle/payload.tar.xz: ${mib} MiB packed (${raw} MiB unpacked), commit $commit$dirty"
[ "$mib" -le "$max_mib" ] || { echo "device_bundle: over the ${max_mib} MiB limit" >&2; exit 1; }
