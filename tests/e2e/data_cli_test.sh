#!/usr/bin/env bash
# End-to-end checks of `batchcast convert` and `batchcast inspect`.
# Usage: data_cli_test.sh CASE   (BATCHCAST_BIN and BATCHCAST_SOURCE_DIR in the environment)
set -euo pipefail
case_name=${1:?case}
bin=${BATCHCAST_BIN:?set BATCHCAST_BIN}
src=${BATCHCAST_SOURCE_DIR:?set BATCHCAST_SOURCE_DIR}
fm=/usr/share/datasets/fashion-mnist
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/bc-e2e-data.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }
json_get() {  # file key  -> value of a top-level key
  "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}
expect_fail() {  # expected-text command...   (must exit non-zero and print the text)
  local want=$1; shift
  if "$@" >out.txt 2>err.txt; then fail "'$*' succeeded, expected failure"; fi
  grep -qF -- "$want" err.txt || { cat err.txt >&2; fail "'$*' did not say: $want"; }
}
convert_t10k() {  # out encode [extra...]
  local out=$1 enc=$2; shift 2
  "$bin" convert idx --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
    --out "$out" --encode "$enc" --fashion-mnist-classes "$@" >/dev/null
}

case_help() {
  for cmd in "convert" "convert idx" "convert imagefolder" "inspect"; do
    # shellcheck disable=SC2086
    "$bin" $cmd --help >help.txt || fail "batchcast $cmd --help failed"
    grep -q "Usage" help.txt || fail "batchcast $cmd --help printed no usage"
  done
}

case_convert_idx() {
  convert_t10k a.h5 png --threads 1
  convert_t10k b.h5 png --threads 2
  ls | grep -q partial && fail "a partial file was left behind"
  "$bin" inspect --json a.h5 >a.json
  "$bin" inspect --json b.h5 >b.json
  [ "$(json_get a.json checksum)" = "$(json_get b.json checksum)" ] || fail "checksum depends on --threads"
  [ "$(json_get a.json num_samples)" = 10000 ] || fail "expected 10000 samples"
  [ "$(json_get a.json encoding)" = png ] || fail "expected png encoding"
  expect_fail "already exists" convert_t10k a.h5 raw
  convert_t10k a.h5 raw --force
  [ "$(json_get a.json checksum)" != "$("$bin" inspect --json a.h5 | "$py" -c 'import json,sys;print(json.load(sys.stdin)["checksum"])')" ] \
    || fail "raw and png files have the same checksum"
}

case_inspect() {
  convert_t10k t.h5 raw
  "$bin" inspect t.h5 >t.txt
  grep -q "samples:         10000" t.txt || fail "text inspect lacks the sample count"
  grep -q "Ankle boot               1000" t.txt || fail "text inspect lacks the class counts"
  "$bin" inspect --json t.h5 >t.json
  "$py" - t.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["schema_version"] == 1 and j["kind"] == "raw" and j["raw_shape"] == [28, 28, 1], j
assert [c["count"] for c in j["classes"]] == [1000] * 10, j["classes"]
assert j["width"] == {"min": 28, "median": 28, "max": 28}, j["width"]
assert j["stored_bytes"] == 10000 * 784 and 0 < j["file_bytes"] < j["stored_bytes"], j
assert len(j["checksum"]) == 16
PY
  # h5py sees the documented layout.
  "$py" - t.h5 "$fm/t10k-labels-idx1-ubyte.gz" <<'PY'
import gzip, sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
assert f.attrs["batchcast_schema_version"] == 1 and f.attrs["batchcast_complete"] == 1
assert f["images"].shape == (10000, 28, 28, 1) and f["images"].dtype == np.uint8
labels = np.frombuffer(gzip.open(sys.argv[2]).read()[8:], dtype=np.uint8)
assert (f["labels"][:] == labels).all() and f["labels"].dtype == np.int64
assert f["class_names"].asstr()[9] == "Ankle boot"
PY
}

case_bad_inputs() {
  expect_fail "/nonexistent/x.gz" "$bin" convert idx --images /nonexistent/x.gz --labels "$fm/t10k-labels-idx1-ubyte.gz" --out o.h5
  expect_fail "has 60000 labels but" "$bin" convert idx --images "$fm/t10k-images-idx3-ubyte.gz" \
    --labels "$fm/train-labels-idx1-ubyte.gz" --out o.h5
  [ ! -e o.h5 ] || fail "a failed conversion left o.h5"
  ls | grep -q partial && fail "a failed conversion left a partial file"
  expect_fail "does not exist" "$bin" inspect /nonexistent/data.h5
  echo "not hdf5" >text.h5
  expect_fail "is not an HDF5 file" "$bin" inspect text.h5
  "$py" -c 'import h5py,numpy as np; f=h5py.File("float.h5","w"); f.attrs["batchcast_schema_version"]=1; f.attrs["batchcast_complete"]=1; f["images"]=np.zeros((2,2,2,1),np.float32)'
  expect_fail "dataset 'images' in float.h5 has dtype float32, expected uint8 or vlen uint8" "$bin" inspect float.h5
  expect_fail "--encode" "$bin" convert idx --images a --labels b --out c --encode webp
  expect_fail "quality" "$bin" convert idx --images a --labels b --out c --quality 0
}

case_imagefolder() {
  convert_t10k png.h5 png
  # Extract six PNGs into two classes with h5py (layout version 2: sample i is images[o:o+n]
  # with o, n = sample_offsets[i], sample_lengths[i]), and add two JPEGs made by cjpeg.
  "$py" - png.h5 <<'PY'
import os, sys, h5py
f = h5py.File(sys.argv[1], "r")
assert f.attrs["batchcast_schema_version"] == 2
for i in range(6):
    d = os.path.join("root", "zebra" if i % 2 else "apple")
    os.makedirs(d, exist_ok=True)
    o, n = int(f["sample_offsets"][i]), int(f["sample_lengths"][i])
    open(os.path.join(d, "%02d.png" % i), "wb").write(f["images"][o:o + n].tobytes())
PY
  { printf 'P5\n16 12\n255\n'; head -c 192 /dev/zero | tr '\0' '\200'; } >gray.pgm
  cjpeg -quality 90 gray.pgm >root/apple/z.jpg
  cp root/apple/z.jpg root/zebra/b.jpeg
  "$bin" convert imagefolder root --out folder.h5 --threads 2 >/dev/null
  "$bin" inspect --json folder.h5 >f.json
  [ "$(json_get f.json num_samples)" = 8 ] || fail "expected 8 samples"
  [ "$(json_get f.json encoding)" = mixed ] || fail "expected mixed encoding"
  "$py" - folder.h5 <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
assert list(f["class_names"].asstr()[:]) == ["apple", "zebra"]
assert list(f["labels"][:]) == [0, 0, 0, 0, 1, 1, 1, 1], f["labels"][:]
sample = lambda i: f["images"][f["sample_offsets"][i]:][:f["sample_lengths"][i]].tobytes()
assert sample(0) == open("root/apple/00.png", "rb").read()
assert sample(3) == open("root/apple/z.jpg", "rb").read()
assert list(f["widths"][:]) == [28, 28, 28, 16, 28, 28, 28, 16]
PY
  head -c 100 root/apple/z.jpg >root/zebra/cut.jpg
  expect_fail "root/zebra/cut.jpg" "$bin" convert imagefolder root --out bad.h5
  [ ! -e bad.h5 ] || fail "a failed imagefolder conversion left bad.h5"
  "$bin" convert imagefolder root --out skip.h5 --skip-bad >out.txt 2>err.txt
  grep -q "skipped: .*root/zebra/cut.jpg" err.txt || fail "--skip-bad did not report the bad file"
  [ "$("$bin" inspect --json skip.h5 | "$py" -c 'import json,sys;print(json.load(sys.stdin)["num_samples"])')" = 8 ] \
    || fail "--skip-bad wrote the wrong sample count"
  [ "$(grep -c "cut.jpg" err.txt)" = 1 ] || { cat err.txt >&2; fail "a skipped file was reported more than once"; }
  # Every problem at once: two bad files, an unsupported extension, an empty class.
  printf 'nope' >root/apple/fake.jpg
  cp root/apple/00.png root/zebra/photo.webp
  mkdir -p root/mango
  expect_fail "empty class: root/mango" "$bin" convert imagefolder root --out all.h5
  grep -q "bad image: root/apple/fake.jpg" err.txt || fail "the first bad file was not listed"
  grep -q "bad image: root/zebra/cut.jpg" err.txt || fail "the second bad file was not listed"
  [ ! -e all.h5 ] || fail "a conversion with bad files wrote all.h5"
  if "$bin" convert imagefolder root --check >out.txt 2>err.txt; then fail "--check passed bad files"; fi
  for want in "bad: root/apple/fake.jpg" "bad: root/zebra/cut.jpg" \
              "ignored: root/zebra/photo.webp: unsupported extension '.webp'" "empty class: mango"; do
    grep -qF "$want" err.txt || { cat err.txt >&2; fail "--check did not list: $want"; }
  done
  grep -q "checked root: 2 bad images, 1 ignored files, 1 empty classes" out.txt || fail "--check summary"
  "$bin" convert imagefolder root --out kept.h5 --skip-bad --allow-empty-classes >out.txt 2>err.txt
  grep -q "8 samples" out.txt || fail "--skip-bad --allow-empty-classes wrote the wrong sample count"
  [ "$(grep -c "photo.webp" err.txt)" = 1 ] || fail "the ignored .webp file was not named once"
  # inspect --verify: every sample against its checksum; a changed byte is found and named.
  "$bin" inspect --verify kept.h5 >out.txt || fail "inspect --verify failed on a good file"
  grep -q "all 8 samples match their checksums" out.txt || fail "inspect --verify summary"
  "$py" - kept.h5 root/apple/00.png <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
png = open(sys.argv[2], "rb").read()
at = data.find(png[40:72])
assert at > 0 and data.find(png[40:72], at + 1) < 0
data[at + 5] ^= 0x10
open(sys.argv[1], "wb").write(data)
PY
  expect_fail "sample 0: hdf5: sample 0 of kept.h5 fails its checksum" "$bin" inspect --verify kept.h5
  grep -q "1 of 8 samples are bad" out.txt || fail "inspect --verify did not count the bad sample"
}

# Chunk compression of raw pixels (docs/dataset-format.md): none, gzip levels and lz4 (an HDF5
# plugin) hold the same pixels and are read by the leader's reader (inspect --verify reads and
# checksums every sample through it); the chunking and sizes are reported; zstd, bad gzip
# levels, compression of encoded bytes and a missing plugin are refused with what to do.
case_compression() {
  for c in none gzip:6 lz4; do
    "$bin" convert idx --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
      --out "$c.h5" --compression "$c" >out.txt
    grep -q "HDF5 chunks of 83 samples (63.5 KiB), compression $c; file" out.txt || { cat out.txt >&2; fail "chunking report"; }
    "$bin" inspect --verify "$c.h5" | grep -q "all 10000 samples match their checksums" \
      || fail "inspect --verify of --compression $c"
  done
  "$py" - <<'PY'
import h5py, numpy as np, os
a = h5py.File("none.h5", "r")["images"]
for name, want in (("gzip:6.h5", "gzip"), ("lz4.h5", 32004)):
    b = h5py.File(name, "r")["images"]
    assert np.array_equal(a[:], b[:]), name
    assert (b.compression == want) if want == "gzip" else (str(want) in str(b._filters)), b._filters
assert os.path.getsize("gzip:6.h5") < os.path.getsize("lz4.h5") < os.path.getsize("none.h5")
PY
  expect_fail "Debian 12's hdf5-filter-plugin has no zstd filter" convert_t10k z.h5 raw --compression zstd
  expect_fail "the gzip level must be 1-9" convert_t10k z.h5 raw --compression gzip:12
  expect_fail "applies to stored pixels only" convert_t10k z.h5 png --compression lz4
  [ ! -e z.h5 ] || fail "a refused conversion wrote z.h5"
  expect_fail "install the Debian package hdf5-filter-plugin" env HDF5_PLUGIN_PATH=/nonexistent \
    "$bin" inspect --verify lz4.h5
}

# Stored forms (--store, docs/dataset-format.md "Stored forms") from a small real-JPEG ImageFolder:
# each form is written with its shape, chunking and checksum (inspect --verify reads every
# sample through the leader's reader); convert h5 re-stores an encoded file the same way; bad
# forms, zstd, a read-only output directory and corrupt samples (--skip-bad, every form).
photo_folder() {  # root: 9 JPEG photos (one gray) and a PNG in two classes
  "$py" - "$1" <<'PY'
import os, sys, numpy as np
from PIL import Image
rng = np.random.default_rng(7)
for i in range(10):
    d = os.path.join(sys.argv[1], "cat" if i % 2 else "dog")
    os.makedirs(d, exist_ok=True)
    w, h = 90 + 17 * i, 70 + 11 * i
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // w, y * 255 // h, (x * y) % 256], -1) + rng.integers(0, 30, (h, w, 3))
    im = Image.fromarray(img.clip(0, 255).astype(np.uint8))
    if i == 3: im = im.convert("L")
    im.save(os.path.join(d, "%02d.%s" % (i, "png" if i == 9 else "jpg")), quality=88)
PY
}
ro_run() {  # dir command...: run with dir read-only (as root: a read-only bind mount)
  local dir=$1; shift
  if [ "$(id -u)" = 0 ]; then
    unshare -m sh -c 'mount --bind -o ro "$0" "$0" && exec "$@"' "$dir" "$@"
  else
    chmod a-w "$dir"; "$@"; local rc=$?; chmod u+w "$dir"; return $rc
  fi
}
case_store() {
  photo_folder root
  "$bin" convert imagefolder root --out enc.h5 >/dev/null
  for form in decoded resized:48 resized:32x32 buckets:32,48; do
    "$bin" convert imagefolder root --out "$form.h5" --store "$form" >out.txt
    grep -q "images (.*): .* KiB per stored sample on average, HDF5 chunks of" out.txt || { cat out.txt >&2; fail "$form: no storage report"; }
    "$bin" inspect --verify --json "$form.h5" >i.json || fail "inspect --verify $form"
    [ "$(json_get i.json num_samples)" = 10 ] || fail "$form: sample count"
    [ "$(json_get i.json store)" = "$form" ] || fail "$form: store attribute"
    "$bin" convert h5 enc.h5 --out "h5-$form.h5" --store "$form" --limit 6 >/dev/null
    "$bin" inspect --json "h5-$form.h5" >j.json
    [ "$(json_get j.json num_samples)" = 6 ] || fail "convert h5 --limit 6 --store $form"
  done
  [ "$(json_get i.json kind)" = encoded ] || fail "buckets keep the encoded bytes"
  "$py" - <<'PY'
import h5py, numpy as np
d = h5py.File("decoded.h5", "r")
shapes = np.stack([d["stored_heights"][:], d["stored_widths"][:], d["stored_channels"][:]], 1)
assert list(d["widths"][:]) == list(d["stored_widths"][:]), "decoded keeps the original size"
assert shapes[0].tolist() == [81, 107, 3] and shapes[1].tolist() == [103, 141, 1], shapes[:3]
assert d["images"].shape == (int(np.prod(shapes, 1).sum()),)
r = h5py.File("resized:48.h5", "r")
assert min(r["stored_widths"][0], r["stored_heights"][0]) == 48
assert h5py.File("resized:32x32.h5", "r")["images"].shape == (10, 32, 32, 3)
a = h5py.File("decoded.h5", "r")["images"][:]
b = h5py.File("h5-decoded.h5", "r")["images"][:]
assert np.array_equal(a[:len(b)], b), "convert h5 stores the same pixels as convert imagefolder"
PY
  "$bin" convert imagefolder root --out lz4.h5 --store decoded --compression lz4 | grep -q "compression lz4" \
    || fail "--compression lz4 with --store decoded"
  expect_fail "--store 'resized:' has no size" "$bin" convert imagefolder root --out x.h5 --store resized:
  expect_fail "is not a stored form" "$bin" convert imagefolder root --out x.h5 --store thumbnails
  expect_fail "no zstd filter" "$bin" convert imagefolder root --out x.h5 --store decoded --compression zstd
  expect_fail "applies to stored pixels only" "$bin" convert imagefolder root --out x.h5 --compression gzip
  expect_fail "--buckets both name offline buckets" "$bin" convert imagefolder root --out x.h5 --store buckets:32 --buckets 48
  [ ! -e x.h5 ] || fail "a refused conversion wrote x.h5"
  mkdir ro
  expect_fail "cannot create" ro_run ro "$bin" convert imagefolder root --out ro/x.h5 --store decoded
  [ -z "$(ls ro)" ] || fail "a conversion into a read-only directory left files"
  head -c 600 root/dog/00.jpg >root/dog/cut.jpg
  for form in encoded decoded resized:48 resized:32x32; do
    expect_fail "bad image: root/dog/cut.jpg" "$bin" convert imagefolder root --out "bad.h5" --store "$form"
    "$bin" convert imagefolder root --out "bad-$form.h5" --store "$form" --skip-bad >out.txt 2>err.txt
    grep -q "skipped: root/dog/cut.jpg" err.txt || fail "$form: --skip-bad did not report the bad file"
    grep -q "wrote bad-$form.h5: 10 samples" out.txt || fail "$form: --skip-bad sample count"
  done
  "$py" - <<'PY'
import h5py
f = h5py.File("enc.h5", "r+"); f["labels"][4] = 1; f.close()  # sample 4 now fails its checksum
PY
  expect_fail "fails its checksum" "$bin" convert h5 enc.h5 --out c.h5 --store decoded
  "$bin" convert h5 enc.h5 --out c.h5 --store decoded --skip-bad 2>err.txt | grep -q "9 samples" \
    || fail "convert h5 --skip-bad"
  grep -q "skipped: sample 4: .*fails its checksum" err.txt || fail "convert h5 did not name the bad sample"
}

# Layout versions (docs/dataset-format.md): a layout version 1 file as h5py writes it (vlen
# PNG bytes, no sample checksums) is read through HDF5 per sample and says so (inspect, one
# INFO line naming convert --upgrade); `convert --upgrade` makes it version 2 (read directly)
# with the same content checksum, in place or to --out; a current file is left alone; misuse
# of the flags is refused.
case_upgrade() {
  convert_t10k png.h5 png
  "$py" - <<'PY'
import h5py, numpy as np
src = h5py.File("png.h5", "r")
o, n = src["sample_offsets"][:300], src["sample_lengths"][:300]
with h5py.File("old.h5", "w") as f:
    f.attrs["batchcast_schema_version"] = 1
    images = f.create_dataset("images", (300,), dtype=h5py.vlen_dtype(np.uint8))
    for i in range(300):
        images[i] = src["images"][o[i]:o[i] + n[i]]
    images.attrs["encoding"] = "png"
    for k in ("labels", "widths", "heights"):
        f[k] = src[k][:300]
    f["class_names"] = src["class_names"][:]
    f.attrs["batchcast_complete"] = 1
PY
  "$bin" inspect --json old.h5 >old.json
  [ "$(json_get old.json layout_version)" = 1 ] || fail "old.h5: layout version"
  [ "$(json_get old.json read_path)" = hdf5-per-sample ] || fail "old.h5: read path"
  "$bin" inspect old.h5 | grep -q "convert --upgrade FILE. makes it version 2" || fail "inspect names the upgrade"
  BATCHCAST_DEBUG=INFO "$bin" inspect old.h5 2>err.txt >/dev/null
  [ "$(grep -c "batchcast convert --upgrade old.h5" err.txt)" = 1 ] || { cat err.txt >&2; fail "one INFO line"; }
  "$bin" convert --upgrade old.h5 --out new.h5 | grep -q "layout version 1 -> 2, 300 samples" || fail "upgrade report"
  "$bin" inspect --verify --json new.h5 >new.json || fail "inspect --verify new.h5"
  [ "$(json_get new.json layout_version)" = 2 ] && [ "$(json_get new.json read_path)" = direct ] \
    || fail "new.h5 is not version 2, direct"
  [ "$(json_get new.json checksum)" = "$(json_get old.json checksum)" ] || fail "upgrade changed the content"
  [ "$(json_get new.json sample_checksums)" = True ] || fail "the upgraded file lacks sample checksums"
  expect_fail "already exists (pass --force" "$bin" convert --upgrade old.h5 --out new.h5
  "$bin" convert --upgrade old.h5 --out new.h5 --force >/dev/null
  cp old.h5 inplace.h5
  "$bin" convert --upgrade inplace.h5 >/dev/null
  [ "$("$bin" inspect --json inplace.h5 | "$py" -c 'import json,sys;print(json.load(sys.stdin)["layout_version"])')" = 2 ] \
    || fail "in-place upgrade"
  ls | grep -q partial && fail "an upgrade left a partial file"
  "$bin" convert --upgrade new.h5 | grep -q "already in the current layout" || fail "a current file"
  expect_fail "give a source" "$bin" convert
  expect_fail "go after the subcommand" "$bin" convert --out x.h5 --force
  if "$bin" convert --upgrade old.h5 idx --images a --labels b --out c.h5 >out.txt 2>err.txt; then
    fail "--upgrade with a subcommand was accepted"
  fi
  "$py" - <<'PY'
import h5py
f = h5py.File("new.h5", "r")
o, n = f["sample_offsets"], f["sample_lengths"]
old = h5py.File("old.h5", "r")["images"]
assert all(f["images"][o[i]:o[i] + n[i]].tobytes() == old[i].tobytes() for i in (0, 17, 299))
PY
}

# `batchcast profile` (docs/profiler.md) on a tiny ImageFolder and budget: the table, CSV and
# JSON hold every strategy (3 forms, compressions for the pixel forms, cache off/on, 1 and 2
# threads) with the extrapolation said; the recommendation is the min-max objective's best for
# every weight vector (checked on the run's own numbers, re-scored with --from-json, never on
# timings) and follows the weights on a table of known numbers; bad inputs are refused.
case_profile() {
  photo_folder root
  "$bin" profile root --samples 6 --thread-counts 1,2 --compressions none,lz4 --image-size 24 \
    --crop random --flip true --drop-caches no --json p.json --csv p.csv >out.txt 2>err.txt \
    || { cat err.txt >&2; fail "profile failed"; }
  grep -q "profile: measuring decoded (lz4), cache on, 2 threads" err.txt || fail "no progress on stderr"
  grep -q "6 of 10 samples measured, 2 epochs; page cache: kept (--drop-caches no)" out.txt || fail "summary line"
  grep -q "for the full dataset multiply by 1.67 (extrapolated" out.txt || fail "extrapolation not said"
  grep -q "batchcast convert imagefolder root --out OUT.h5 --store" out.txt || fail "no command line"
  [ "$(grep -c "^resized:24 " out.txt)" = 8 ] || fail "table rows"
  for w in 0,0,1 1,0,1 0,1,1 0,1,0 1,0,0 2,1,3; do
    "$bin" profile --from-json p.json --weights "$w" --json "w$w.json" >/dev/null || fail "--from-json $w"
  done
  "$bin" profile --from-json p.json --caches off --json off.json >/dev/null || fail "--caches off"
  # The plot: batchcast report renders a profile JSON (one point per strategy, the pick starred).
  "$bin" report p.json --out prof_report >rep.txt 2>&1 || { cat rep.txt >&2; fail "report of p.json"; }
  grep -q "profile of 20 strategies: 1 plot" rep.txt || { cat rep.txt >&2; fail "report: no profile plot"; }
  [ -s prof_report/profile.png ] && [ -s prof_report/profile.svg ] || fail "no profile.png/.svg"
  grep -q "batchcast convert imagefolder root" prof_report/profile.html || fail "profile.html has no command"
  echo '{"strategies": 3}' > notprof.json
  expect_fail "not a \`batchcast profile --json\` file" "$bin" report notprof.json --out x
  "$py" - <<'PY'
import csv, json
p = json.load(open("p.json"))
assert p["samples"] == 6 and p["full_samples"] == 10 and p["extrapolated"] is True
rows = p["strategies"]
assert len(rows) == 20, len(rows)  # encoded x1 + (decoded, resized:24) x (none, lz4); x cache x threads
assert {r["form"] for r in rows} == {"encoded", "decoded", "resized:24"}
assert {(r["cache"], r["threads"]) for r in rows} == {(c, t) for c in (False, True) for t in (1, 2)}
assert all(r["samples_per_s"] > 0 and r["cpu_s_per_sample"] > 0 and r["storage_bytes"] > 0 for r in rows)
assert all(abs(r["storage_bytes_full"] - r["storage_bytes"] * 10 / 6) <= 1 for r in rows)
assert all(r["chunk_bytes"] >= 65536 for r in rows if r["form"] != "encoded")
table = list(csv.DictReader(open("p.csv")))
assert len(table) == 20 and float(table[3]["samples_per_s"]) == round(rows[3]["samples_per_s"], 3)

def best(rows, w):
    def norm(key):
        v = [r[key] for r in rows]; lo, hi = min(v), max(v)
        return [(x - lo) / (hi - lo) if hi > lo else 0.0 for x in v]
    p, s, t = norm("offline_s"), norm("storage_bytes"), norm("samples_per_s")
    score = [w[2] * t[i] - w[0] * p[i] - w[1] * s[i] for i in range(len(rows))]
    return max(range(len(rows)), key=lambda i: (score[i], -i))

for w in ("0,0,1", "1,0,1", "0,1,1", "0,1,0", "1,0,0", "2,1,3"):
    q = json.load(open("w%s.json" % w))
    weights = [float(x) for x in w.split(",")]
    assert q["weights"] == weights
    assert q["recommended"] == best(rows, weights), (w, q["recommended"], best(rows, weights))
    r = rows[q["recommended"]]
    assert q["command"].startswith("batchcast convert imagefolder root --out OUT.h5 --store " + r["form"])
    assert ("--threads=%d" % r["threads"]) in q["command"] and ("--cache=" in q["command"]) == r["cache"]
assert rows[json.load(open("w0,1,0.json"))["recommended"]]["storage_bytes"] == min(r["storage_bytes"] for r in rows)
off = json.load(open("off.json"))  # --caches off: the cache-off strategies only, scored among themselves
assert [r["cache"] for r in off["strategies"]] == [False] * 10
assert off["recommended"] == best([r for r in rows if not r["cache"]], [0, 0, 1])

# Known numbers: throughput alone picks the fastest (1); with offline time or storage weighed
# too, the one nearly as fast and 10x quicker to make (2); storage alone the smallest (0).
known = dict(p, strategies=[
    dict(rows[0], form="encoded", offline_s=1.0, storage_bytes=40, samples_per_s=100.0),
    dict(rows[0], form="decoded", offline_s=10.0, storage_bytes=900, samples_per_s=1000.0),
    dict(rows[0], form="resized:24", offline_s=1.0, storage_bytes=50, samples_per_s=900.0)])
json.dump(known, open("known.json", "w"))
PY
  for pair in 0,0,1:1 1,0,1:2 0,1,0:0 0,1,1:2; do
    "$bin" profile --from-json known.json --weights "${pair%%:*}" --json k.json >/dev/null
    [ "$(json_get k.json recommended)" = "${pair##*:}" ] || fail "weights ${pair%%:*}: recommended $(json_get k.json recommended), expected ${pair##*:}"
  done
  expect_fail "dataset nowhere does not exist" "$bin" profile nowhere --image-size 24
  expect_fail "--weights '1,2' has 2 values" "$bin" profile root --weights 1,2
  expect_fail "'x' is not a weight" "$bin" profile root --weights x,0,1
  expect_fail "are all 0" "$bin" profile root --weights 0,0,0
  expect_fail "--caches 'maybe': 'maybe' is not on or off" "$bin" profile root --caches maybe
  expect_fail "--samples 0 is not a budget" "$bin" profile root --samples 0
  expect_fail "option 'threads' is not one the profiler measures with" "$bin" profile root --threads 2
  expect_fail "option 'ring_slots' is not one the profiler measures with" "$bin" profile root --ring-slots 4
  expect_fail "is not a \`batchcast profile --json\` file" "$bin" profile --from-json p.csv
  mkdir ro
  expect_fail "cannot create the temp directory" ro_run ro "$bin" profile root --tmp ro --image-size 24 --drop-caches no
}

case_fashion_mnist_script() {
  bash "$src/scripts/fashion_mnist.sh" fm "$bin" >/dev/null
  for f in fashion-mnist-train.h5 fashion-mnist-test.h5 fashion-mnist-train-png.h5; do
    [ -s "fm/$f" ] || fail "fashion_mnist.sh did not write $f"
  done
  "$bin" inspect --json fm/fashion-mnist-train-png.h5 >p.json
  [ "$(json_get p.json num_samples)" = 60000 ] || fail "png train split has the wrong size"
  bash "$src/scripts/fashion_mnist.sh" fm "$bin" | grep -c kept | grep -q 3 || fail "second run was not a no-op"
}

"case_$case_name"
echo "PASS: $case_name"
