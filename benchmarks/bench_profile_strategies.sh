#!/usr/bin/env bash
# `make bench B=profile`, second part: `batchcast profile` (docs/profiler.md) on the real-photo
# JPEG set as an ImageFolder (RandomResizedCrop 224 + flip + normalize) and on Fashion-MNIST's
# PNG training split (28x28, crop none): the measured table, then the recommendation for
# weights (0,0,1), (1,0,1) and (0,1,1) among the strategies with the cache off, on, and both
# (re-scored from the one measurement with --from-json), and one JSON line.
# Usage: bench_profile_strategies.sh BUILD_DIR PHOTO_DIR
set -euo pipefail
build=${1:?build dir}
photos=${2:?photo dir}
cli="$build/bin/batchcast"
out="$build/benchmarks/profile_strategies"
mkdir -p "$out"
folder="$out/photos"  # ImageFolder: one class directory
if [ ! -f "$out/photos.complete" ]; then
  rm -rf "$folder" && mkdir -p "$folder/photo" && cp "$photos"/*.jpg "$folder/photo/"
  touch "$out/photos.complete"
fi
fm="$out/fm/fashion-mnist-train-png.h5"
[ -f "$fm" ] || bash "$(dirname "$0")/../scripts/fashion_mnist.sh" "$out/fm" "$cli" >/dev/null
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
run() {  # name source [profile options...]
  local name=$1 src=$2; shift 2
  echo
  echo "== batchcast profile: $name =="
  "$cli" profile "$src" --json "$out/$name.json" --csv "$out/$name.csv" "$@" 2>/dev/null
  for caches in off on off,on; do
    for w in 0,0,1 1,0,1 0,1,1; do
      printf 'cache %-6s weights %s: ' "$caches" "$w"
      "$cli" profile --from-json "$out/$name.json" --weights "$w" --caches "$caches" \
        --json "$out/$name-$w-$caches.json" | grep -o "): .*(score [-0-9.]*)" | cut -c4-
    done
  done
}
run photos "$folder" --samples 200 --image-size 224 --crop random --flip true --normalize true
run fashion_mnist "$fm" --samples 4000 --image-size 28 --crop none
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
line = {"benchmark": "profile_strategies"}
for name in ("photos", "fashion_mnist"):
    p = json.load(open("%s/%s.json" % (out, name)))
    line[name] = {"samples": p["samples"], "full_samples": p["full_samples"], "strategies": len(p["strategies"])}
    for caches in ("off", "on", "off,on"):
        for w in ("0,0,1", "1,0,1", "0,1,1"):
            q = json.load(open("%s/%s-%s-%s.json" % (out, name, w, caches)))
            r = q["strategies"][q["recommended"]]
            line[name]["%s|%s" % (w, caches)] = "%s/%s/cache %s/%d thr: %.0f samples/s, %.1f MB" % (
                r["form"], r["compression"], "on" if r["cache"] else "off", r["threads"],
                r["samples_per_s"], r["storage_bytes_full"] / 1e6)
print(json.dumps(line))
PY
