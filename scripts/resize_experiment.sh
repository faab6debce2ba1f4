#!/usr/bin/env bash
# Progressive resizing, with and without, at the same training-time budget
# (docs/progressive-resizing.md, "A real training run").
#
# The demo's small CNN (sweep_trainer: adaptive-pooling head, LR x the delivered lr_factor;
# EXP_WIDTH=32 channels, twice the demo's, so that compute, not per-step overhead, dominates
# and scales with pixels) trains on Fashion-MNIST upsampled to EXP_SIZE px by the leader's
# pipeline (random crop + flip), once at full size all the time and once under EXP_RESIZE,
# each for EXP_BUDGET
# seconds of training time (evaluation excluded), evaluating on EXP_TEST_LIMIT test images
# at full size every EXP_EVAL_EVERY seconds. One leader and one trainer per run (2 ranks),
# telemetry on; then `batchcast report` draws accuracy over time for both runs.
# Usage: scripts/resize_experiment.sh [BUILD_DIR]   (about 2 x EXP_BUDGET + 1 min when the
#   machine is otherwise idle; with EXP_CLOCK=cpu longer on a loaded one)
# Knobs: EXP_BUDGET=120 EXP_SIZE=64 EXP_RESIZE='resize(sizes=32:48:64,upgrade=0.34,...)'
#   EXP_CLOCK=wall|cpu (the budget's clock: wall time, or the training thread's CPU time,
#   which keeps the comparison fair when other work shares the cores)
#   EXP_LIMIT=0 (training samples per epoch, 0 = all 60000) EXP_EPOCHS=40 (the baseline's,
#   a ceiling) EXP_RESIZE_EPOCHS=5 (the schedule's length: chosen so that its epochs take
#   about the budget at the rates measured on an idle core: 1,600 samples/s at 64 px,
#   3,700 at 32)
#   EXP_LR=0.02 EXP_BATCH=64 EXP_EVAL_EVERY=10 EXP_TEST_LIMIT=5000 EXP_THREADS=1 EXP_WIDTH=32
#   EXP_SEED=1 (the stream's seed: order, augmentation, which samples upgrade)
#   EXP_OUT=BUILD_DIR/resize-experiment EXP_DATA=<repo>/data
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$here/$build ;; esac
bin=$build/bin
[ -x "$bin/sweep_trainer" ] || {
  echo "resize_experiment.sh: $bin/sweep_trainer is missing (LibTorch build: see scripts/demo.sh)" >&2
  exit 1; }
budget=${EXP_BUDGET:-120}
size=${EXP_SIZE:-64}
spec=${EXP_RESIZE:-resize(sizes=32:48:64,upgrade=0.34,mode=mixed,lr=linear,final_epochs=1)}
out=${EXP_OUT:-$build/resize-experiment}
data=${EXP_DATA:-$here/data}
mkdir -p "$out"
bash "$here/scripts/fashion_mnist.sh" "$data" "$bin/batchcast" > /dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset BATCHCAST_RESIZE
common=(--dataset="$data/fashion-mnist-train-png.h5" --test-dataset="$data/fashion-mnist-test.h5"
        --lrs="${EXP_LR:-0.02}" --batch-size="${EXP_BATCH:-64}" --threads="${EXP_THREADS:-1}"
        --limit-samples="${EXP_LIMIT:-0}" --channels=1 --image-size="$size" --width="${EXP_WIDTH:-32}"
        --crop=random --crop-scale-min=0.6 --flip=true --seed="${EXP_SEED:-1}" --shuffle=true
        --budget-s="$budget" --eval-every-s="${EXP_EVAL_EVERY:-10}"
        --budget-clock="${EXP_CLOCK:-wall}"
        --test-limit="${EXP_TEST_LIMIT:-5000}" --eval-size="$size")

run() {  # name epochs [flags...]
  local name=$1 epochs=$2
  shift 2
  rm -f "$out/$name.h5" "$out/$name.json"
  echo "== $name: $epochs epochs at most, $budget s of training (${EXP_CLOCK:-wall} clock) $*"
  mpirun --oversubscribe -n 2 "$bin/sweep_trainer" "${common[@]}" --epochs="$epochs" \
    --results="$out/$name.json" \
    --telemetry="telemetry(hdf5=$out/$name.h5,interval=1s)" --experiment=resize \
    --run-name="$name" "$@" \
    > "$out/$name.log" 2>&1 || { tail -30 "$out/$name.log"; exit 1; }
  grep -E "^(trainer|[0-9]+ )" "$out/$name.log" | head -3
}
run full-size "${EXP_EPOCHS:-40}"
run resize "${EXP_RESIZE_EPOCHS:-5}" --resize="$spec"
awk '/^progressive resizing plan/ { on = 1 } on && /^total:/ { print; exit } on' "$out/resize.log"
"$bin/batchcast" report "$out/full-size.h5" "$out/resize.h5" --labels full-size,resize \
  --out "$out/report"

/usr/bin/python3 - "$out/full-size.json" "$out/resize.json" "$budget" "${EXP_CLOCK:-wall}" <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:3]]
budget = float(sys.argv[3])
clock = "cpu_s" if sys.argv[4] == "cpu" else "train_s"
names = ["full-size", "resize"]
def acc_at(evals, t):
    """Accuracy of the last evaluation at or before training time t."""
    best = None
    for e in evals:  # the budget check runs after a step: the last one lands just past it
        if e[clock] <= t + 0.5:
            best = e["accuracy"]
    return best
print(f"\n== accuracy (%) on held-out images at full size, by training time (s, {clock})")
marks = [budget * f for f in (0.1, 0.2, 0.3, 0.5, 0.75, 1.0)]
print(f"{'run':10}" + "".join(f"{m:>8.0f}" for m in marks) + f"{'samples':>10}{'epochs':>8}")
for name, r in zip(names, runs):
    ev = r.get("evals_trainer0", [])
    cells = "".join(f"{(100 * a if a is not None else float('nan')):>8.2f}"
                    for a in (acc_at(ev, m) for m in marks))
    last = ev[-1] if ev else {"samples": 0, "epoch": 0}
    print(f"{name:10}{cells}{last['samples']:>10.0f}{last['epoch'] + 1:>8}")
def first_reach(evals, target):
    for e in evals:
        if e["accuracy"] >= target:
            return e[clock]
    return None
final = [r["evals_trainer0"][-1]["accuracy"] for r in runs]
target = min(final) - 0.005
t = [first_reach(r["evals_trainer0"], target) for r in runs]
print(f"time to {100 * target:.1f}% (the lower final accuracy - 0.5 pt): "
      + ", ".join(f"{n} {x:.0f} s" if x is not None else f"{n} never" for n, x in zip(names, t)))
summary = {"benchmark": "resize_train", "budget_s": budget, "clock": clock,
           "final_accuracy": {n: round(a, 4) for n, a in zip(names, final)},
           "time_to_target_s": {n: x for n, x in zip(names, t)}, "target": round(target, 4),
           "samples": {n: r["evals_trainer0"][-1]["samples"] for n, r in zip(names, runs)}}
print(json.dumps(summary))
PY
echo "report: $out/report/report.html"
