#!/usr/bin/env bash
# e2e: `make demo RESIZE=...` on a small budget. The demo (scripts/demo.sh) runs a leader and
# two LibTorch trainers under a progressive-resizing schedule with telemetry on; this checks
# that the plan, each epoch's sizes, batch sizes and LR factors, and the trainers'
# evaluations are in the printed summary, the HDF5/CSV files and the rendered report, with
# the values the schedule arithmetic gives (docs/progressive-resizing.md).
# Usage: resize_demo_test.sh BUILD_DIR   (BATCHCAST_SOURCE_DIR: the source tree)
set -euo pipefail
build=${1:?usage: resize_demo_test.sh BUILD_DIR}
src=${BATCHCAST_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d /tmp/bc_resize_demo_XXXXXX)
[ -n "${KEEP_WORK:-}" ] || trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# sizes 16, 22, 28 (full 28): at 16 a consumer batch of 32 becomes floor(32 x 784 / 256) = 98
# with LR factor 98/32 = 3.06; at 22, floor(32 x 784 / 484) = 51, factor 1.59. Three epochs:
# epoch 0 all at 16, epoch 1 half moved up to 22, epoch 2 the final phase at 28.
RESIZE='resize(sizes=16:22:28,upgrade=0.5,mode=mixed,final_epochs=1)' \
DEMO_MODES=on DEMO_TRAINERS=2 DEMO_EPOCHS=3 DEMO_LIMIT=1200 DEMO_TEST_LIMIT=500 \
DEMO_THREADS=1 DEMO_LRS=0.02,0.05 DEMO_BATCH=32 DEMO_DATA="$build/demo-data" DEMO_OUT="$work" \
  bash "$src/scripts/demo.sh" "$build" > "$work/out.txt" 2>&1 || {
  tail -40 "$work/out.txt"; fail "demo.sh with RESIZE failed"; }
out=$work/out.txt
need() {  # pattern what
  grep -qF -- "$1" "$out" || { tail -60 "$out"; fail "$2: '$1' not in the demo output"; }
}
# The plan, printed before training by the leader.
need "progressive resizing resize(sizes=16:22:28" "the plan's head"
need "steps" "the plan's epoch table"
# The telemetry summary's annotations: the leader's per-epoch mix ...
need "annotations (progressive resizing" "the annotation section of the summary"
need "leader epoch 0 (ramp): 1200 of 1200 samples" "the leader's epoch 0 line"
need "leader epoch 1 (ramp): 1200 of 1200 samples" "the leader's epoch 1 line"
need "leader epoch 2 (final): 1200 of 1200 samples" "the leader's final epoch line"
need "600 @16" "epoch 1: half of the samples still at 16"
need "600 @22" "epoch 1: half moved up to 22"
# ... and what each trainer received per epoch: sizes, its scaled batch, its LR factor.
need "consumer b=32: epoch 0:" "a trainer's epoch 0 line"
need "@16 13 x 98 lr x3.06;" "epoch 0: 1200 samples at 16 in batches of 98 with LR x3.06"
need "@22" "a trainer's batches at 22"
need "x 51 lr x1.59;" "batches of 51 with LR x1.59 at 22"
need "consumer b=32: epoch 2:" "a trainer's final epoch line"
need "@28 38 x 32 lr x1;" "the final epoch at full size: 38 batches of 32, LR x1"
need "eval: train_s=" "the trainers' evaluations"

h5=$work/telemetry.h5
[ -s "$h5" ] || fail "no telemetry file $h5"
/usr/bin/python3 - "$h5" "$work/telemetry.csv" <<'PY' || fail "telemetry files lack the resize series"
import csv, sys
import h5py
import numpy as np
h5, csv_path = sys.argv[1:3]
with h5py.File(h5, "r") as f:
    ranks = [f[k] for k in f.keys() if k.startswith("rank_")]
    assert len(ranks) == 3, f"{len(ranks)} ranks"
    consumers = [g for g in ranks if g.attrs["role"] in (b"consumer", "consumer")]
    assert len(consumers) == 2
    for g in ranks:
        s = g["series"]
        sizes = set(np.unique(s["image_size"][()]).tolist()) - {0.0}
        assert sizes and min(sizes) >= 16 and max(sizes) <= 28, sizes  # interval means
        assert np.nanmax(s["lr_factor"][()]) > 1.5, "an LR factor above 1 at small sizes"
        notes = g.attrs.get("annotations", b"")
        notes = notes.decode() if isinstance(notes, bytes) else notes
        assert "epoch 2" in notes, f"rank {g.attrs['rank']}: no epoch 2 annotation"
    for g in consumers:
        assert np.nanmax(g["series"]["eval_accuracy"][()]) > 0.1, "no evaluation recorded"
    summary = f.attrs["summary"]
    summary = summary.decode() if isinstance(summary, bytes) else summary
    assert "leader epoch 2 (final)" in summary
with open(csv_path) as fh:
    rows = list(csv.DictReader(fh))
assert any(0 < float(r["image_size"]) < 28 for r in rows), "no row below full size in the CSV"
assert "eval_accuracy" in rows[0]
PY
html=$work/report/report.html
[ -s "$html" ] || fail "no report $html"
for plot in resize accuracy; do
  [ -s "$work/report/$plot.png" ] || fail "the report has no $plot plot"
done
grep -qF "leader epoch 1 (ramp)" "$html" || fail "the report does not show the annotations"
echo "PASS: resize demo: plan, per-epoch sizes / batch sizes / LR factors and evaluations in the telemetry"
