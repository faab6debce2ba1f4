#!/usr/bin/env bash
# End-to-end tests of `batchcast train-many` (docs/multi-model.md) against a real
# `batchcast serve` on the first 256 Fashion-MNIST training images (producer batches of 100, 100 and 56 per epoch).
# Usage: train_many_test.sh CASE   (BATCHCAST_BIN and TRAIN_MANY_FIXTURE in the environment)
#   fixture     makes the models and the dataset into $TRAIN_MANY_FIXTURE (a ctest fixture)
#   config      configuration errors: unknown key (did you mean), bad value, missing file,
#               a model that does not take the batch, checkpoint_every without mpirun, a
#               sequential policy, a control file, mode=shard, leader_trains, gpu=on under mpirun
#   policies    fcfs, priority, sjf (params and epochs), round-robin: the order of the epochs
#               and of completion; concurrent; every model epoch sees every sample once
#   separator   pause by name, a finished model saved and released while the others are
#               paused (no consumer left attached), SIGKILL, restart continuing every model
#               from its checkpoint, resume by name during the run; then SIGKILL at an
#               arbitrary moment of a round-robin run and a restart
#   mpi         under mpirun -n 2 (the MPI Runtime's leader on rank 0): a job of 3 ranks,
#               ranks_per_node and a state.json with a field of the wrong type refused;
#               SIGKILL at a random mid-epoch checkpoint (seed printed; TRAIN_MANY_SEED
#               replays it), restart: every model resumes at its stream position, every
#               model epoch sees every sample once, the optimizer's step count goes on, and
#               the per-model named telemetry series hold a point per step of the run
set -euo pipefail
case_name=${1:?case}
bin=${BATCHCAST_BIN:?set BATCHCAST_BIN}
unset BATCHCAST_BIN  # not a batchcast option: the service would warn about it
fx=${TRAIN_MANY_FIXTURE:?set TRAIN_MANY_FIXTURE}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-/usr/bin/python3}  # the tree's interpreter (its torch scripts the models)
n=256
work=$(mktemp -d "${TMPDIR:-/tmp}/bc-train-many.XXXXXX")
serve_pid=
train_pid=
cleanup() {
  for p in $train_pid $serve_pid; do kill "$p" 2>/dev/null || true; done
  for p in $train_pid $serve_pid; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_fail() {  # expected-text command...   (must exit non-zero and print the text)
  local want=$1; shift
  if "$@" >out.txt 2>err.txt; then fail "'$*' succeeded, expected failure"; fi
  grep -qF -- "$want" err.txt || { cat err.txt >&2; fail "'$*' did not say: $want"; }
}
# Waits (deadline 120 s: only turns a hang into a failure) until `cmd` succeeds.
wait_for() {
  local what=$1; shift
  for _ in $(seq 1200); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  fail "timed out waiting for $what"
}
sock=bc-train-many-$$
service_up_or_gone() { grep -q "listening on" serve.log || ! kill -0 "$serve_pid" 2>/dev/null; }
start_service() {
  "$bin" serve --dataset="$fx/train.h5" --socket="$sock" --max-batch=100 --producer-batch=100 --threads=1 --seed=7 \
    >serve.log 2>&1 &
  serve_pid=$!
  wait_for "the service to listen" service_up_or_gone
  grep -q "listening on" serve.log || { cat serve.log >&2; fail "batchcast serve did not start"; }
}
# config.json for policy $1 with the three models (extra top-level JSON in $2).
write_config() {  # file policy out [extra-json]
  "$py" - "$1" "$2" "$3" "$fx" "${4:-{\}}" <<'PY'
import json, sys
path, policy, out, fx, extra = sys.argv[1:6]
cfg = {"policy": policy, "output_dir": out, "mean": 0.286, "std": 0.353,
       "models": [
           {"name": "mlp", "model": fx + "/mlp.pt", "lr": 0.05, "batch_size": 64,
            "optimizer": "sgd", "momentum": 0.9, "epochs": 1, "priority": 1},
           {"name": "lenet", "model": fx + "/lenet.pt", "lr": 0.002, "batch_size": 32,
            "optimizer": "adam", "scheduler": {"type": "step", "step_size": 1, "gamma": 0.5},
            "epochs": 3, "priority": 2},
           {"name": "resnet", "model": fx + "/resnet.pt", "lr": 0.003, "batch_size": 100,
            "optimizer": "adamw", "weight_decay": 0.01, "scheduler": "cosine",
            "criterion": "cross_entropy", "epochs": 2, "priority": 2}]}
cfg.update(json.loads(extra))
json.dump(cfg, open(path, "w"), indent=1)
PY
}
train() { "$bin" train-many "$@" --address="@$sock"; }
# LOG ARGS...: train-many in the background, train_pid its own pid. (`train ... &` ran the
# function in a subshell: $! was the subshell's, and a SIGKILL left the trainer running
# beside its restart, training the same models twice.)
train_bg() {
  local log=$1
  shift
  "$bin" train-many "$@" --address="@$sock" >"$log" 2>&1 &
  train_pid=$!
}

case_fixture() {
  rm -rf "$fx"
  "$py" "$here/make_fixture.py" "$fx" "$n"
  "$bin" convert idx --images "$fx/images.idx" --labels "$fx/labels.idx" --out "$fx/train.h5" \
    --encode raw --fashion-mnist-classes >/dev/null
}

case_config() {
  write_config good.json fcfs out
  expect_fail "unknown key 'polcy' (did you mean 'policy'?)" \
    train <("$py" -c 'import json;c=json.load(open("good.json"));c["polcy"]=c.pop("policy");print(json.dumps(c))')
  "$py" -c 'import json;c=json.load(open("good.json"));c["models"][1]["batchsize"]=8;json.dump(c,open("typo.json","w"))'
  expect_fail "models[1] ('lenet'): unknown key 'batchsize' (did you mean 'batch_size'?)" train typo.json
  "$py" -c 'import json;c=json.load(open("good.json"));c["models"][2]["optimizer"]="adamm";json.dump(c,open("opt.json","w"))'
  expect_fail "'optimizer' is 'adamm' (did you mean 'adam'?)" train opt.json
  "$py" -c 'import json;c=json.load(open("good.json"));c["models"][0]["lr"]=-1;json.dump(c,open("lr.json","w"))'
  expect_fail "models[0] ('mlp'): 'lr' is -1; expected a number in [0, 1000]" train lr.json
  "$py" -c 'import json;c=json.load(open("good.json"));c["models"][0]["model"]="nope.pt";json.dump(c,open("nf.json","w"))'
  expect_fail "model file $work/nope.pt cannot be read" train nf.json
  "$py" -c 'import json;c=json.load(open("good.json"));c["models"][1]["name"]="mlp";json.dump(c,open("dup.json","w"))'
  expect_fail "two models are named 'mlp'" train dup.json
  expect_fail "cannot read the configuration missing.json" train missing.json
  "$py" -c 'import json;c=json.load(open("good.json"));c["checkpoint_every"]=2;json.dump(c,open("ce.json","w"))'
  expect_fail "'checkpoint_every' (2) resumes a model inside an epoch, which needs the MPI front door" \
    train ce.json
  # Under mpirun (its environment; refused before MPI starts): the sequential policies.
  expect_fail "train-many under mpirun runs policy 'concurrent' only, not 'fcfs'" \
    env -u BATCHCAST_ADDRESS OMPI_COMM_WORLD_SIZE=2 "$bin" train-many good.json
  # ... a control file (pause by name), mode=shard and leader_trains: each refused, named.
  "$py" -c 'import json;c=json.load(open("good.json"));c["policy"]="concurrent";json.dump(c,open("cc.json","w"))'
  "$py" -c 'import json;c=json.load(open("cc.json"));c["control_file"]="ctl";json.dump(c,open("ctl.json","w"))'
  expect_fail "train-many under mpirun does not take 'control_file' (" \
    env -u BATCHCAST_ADDRESS OMPI_COMM_WORLD_SIZE=2 "$bin" train-many ctl.json
  expect_fail "train-many under mpirun: option 'mode=shard' does not apply" \
    env -u BATCHCAST_ADDRESS OMPI_COMM_WORLD_SIZE=2 "$bin" train-many cc.json --mode=shard
  expect_fail "train-many under mpirun: option 'leader_trains' does not apply" \
    env -u BATCHCAST_ADDRESS OMPI_COMM_WORLD_SIZE=2 "$bin" train-many cc.json --leader-trains=true
  # ... and gpu=on: the per-model consumers take host batches (the front door runs gpu=off).
  expect_fail "train-many under mpirun: option 'gpu=on' does not apply" \
    env -u BATCHCAST_ADDRESS OMPI_COMM_WORLD_SIZE=2 "$bin" train-many cc.json --gpu=on
  # Outputs are checked at the start (issue 32): an unwritable telemetry path and an
  # output_dir that cannot be made are refused before any model loads, naming the path.
  echo x >plain
  expect_fail "telemetry hdf5 file $work/plain/t.train-many-" train good.json --telemetry="hdf5=$work/plain/t.h5"
  expect_fail "telemetry run directory $work/plain/run" train good.json --telemetry="dir:$work/plain/run"
  "$py" -c 'import json;c=json.load(open("good.json"));c["output_dir"]="plain/out";json.dump(c,open("od.json","w"))'
  expect_fail "cannot create output_dir $work/plain/out: Not a directory" train od.json
  # A model that does not take the batch: named, with the batch shape, at its first step.
  start_service
  "$py" -c 'import json,sys;c=json.load(open("good.json"));c["models"]=[dict(c["models"][1],name="rgb",model=sys.argv[1]+"/rgb_lenet.pt")];json.dump(c,open("rgb.json","w"))' "$fx"
  expect_fail "model 'rgb' ($fx/rgb_lenet.pt) does not take the batch: images float32 [32, 1, 28, 28]" \
    train rgb.json
}

case_policies() {
  start_service
  for p in fcfs priority sjf sjf-epochs round-robin concurrent; do
    local extra='{}' policy=$p
    [ "$p" = sjf-epochs ] && { policy=sjf; extra='{"sjf_by": "epochs"}'; }
    write_config "$p.json" "$policy" "out-$p" "$extra"
    local tel=()  # the concurrent run records telemetry: per-model series for batchcast report
    [ "$p" = concurrent ] && tel=(--telemetry="telemetry(hdf5=$work/tel.h5)")
    train "$p.json" "${tel[@]}" >"$p.log" 2>&1 || { cat "$p.log" >&2; fail "train-many under $p failed"; }
    if [ "$policy" != concurrent ]; then
      "$py" "$here/check_run.py" order "out-$p" "$p.json" "$fx/params.json"
    fi
    "$py" "$here/check_run.py" once "out-$p" "$n"
    for m in mlp lenet resnet; do
      [ "$("$py" "$here/check_run.py" field "out-$p" $m finished)" = True ] || fail "$p: $m did not finish"
      [ -s "out-$p/$m/model.pt" ] && [ -s "out-$p/$m/optimizer.pt" ] || fail "$p: $m was not saved"
    done
  done
  "$bin" report "$work"/tel.*.h5 --out report >report.log 2>&1 || { cat report.log >&2; fail "batchcast report failed"; }
  for want in "model mlp: 1 epochs" "model lenet: 3 epochs" "model resnet: 2 epochs"; do
    grep -q "$want" report.log || { cat report.log >&2; fail "batchcast report did not say: $want"; }
  done
  grep -q "Models (batchcast train-many)" report/report.html || fail "report.html has no model table"
  [ -s report/models.png ] || fail "the report has no per-model plot"
  # The named series of each model: a point per step (4, 24, 6 steps) and per epoch (1, 3, 2).
  "$py" - "$work"/tel.*.h5 <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
g = f[[k for k in f if k.startswith("rank_")][0]]["named/model"]
for m, (steps, epochs) in {"mlp": (4, 1), "lenet": (24, 3), "resnet": (6, 2)}.items():
    for s in ("loss", "accuracy", "step_ms", "samples_per_s"):
        assert g[m][s].shape == (steps, 2), (m, s, g[m][s].shape)
    for s in ("epoch_loss", "epoch_accuracy", "lr", "peak_rss_mib"):
        assert g[m][s].shape == (epochs, 2), (m, s, g[m][s].shape)
    assert abs(g[m]["lr"][0, 1] - {"mlp": 0.05, "lenet": 0.002, "resnet": 0.003}[m]) < 1e-12
PY
  # The learning-rate schedules: lenet halves every epoch (step), resnet follows the cosine.
  "$py" - out-fcfs <<'PY'
import json, math, sys
ev = [json.loads(l) for l in open(sys.argv[1] + "/events.jsonl")]
lr = {(e["model"], e["epoch"]): e["lr"] for e in ev if e["event"] == "epoch"}
want = {("lenet", 0): 0.002, ("lenet", 1): 0.001, ("lenet", 2): 0.0005,
        ("resnet", 0): 0.003, ("resnet", 1): 0.003 * 0.5 * (1 + math.cos(math.pi / 2))}
for k, v in want.items():
    assert abs(lr[k] - v) < 1e-12, "lr of %s epoch %d is %r, expected %r" % (k[0], k[1], lr[k], v)
PY
}

# One line per event kind of a model in events.jsonl.
has_event() { grep -q "\"event\":\"$2\".*\"model\":\"$1\"\|\"model\":\"$1\".*\"event\":\"$2\"" "$3/events.jsonl"; }

case_separator() {
  start_service
  write_config run.json concurrent out '{"control_file": "control"}'
  printf 'lenet@1\nresnet@1\n' >control
  train_bg run1.log run.json
  wait_for "mlp to be released" has_event mlp released out
  wait_for "mlp to detach" has_event mlp detached out
  wait_for "lenet to pause" has_event lenet paused out
  wait_for "resnet to pause" has_event resnet paused out
  # The finished model is back while the others are not done, and no consumer is attached.
  [ -s out/mlp/model.pt ] && [ -s out/mlp/optimizer.pt ] || fail "mlp was not saved when it finished"
  "$py" -c 'import sys,torch; m=torch.jit.load(sys.argv[1]); print(m(torch.zeros(2,1,28,28)).shape)' \
    out/mlp/model.pt | grep -q "torch.Size(\[2, 10\])" || fail "the saved mlp does not load"
  "$bin" status --socket="$sock" --json >status.json
  "$py" -c 'import json,sys; s=json.load(open("status.json")); a=[m for m in s["consumers"] if m.get("state") in ("active","joining")]; sys.exit(1 if a else 0)' \
    || { cat status.json >&2; fail "a consumer is still attached while every model is paused or done"; }
  kill -KILL "$train_pid"
  wait "$train_pid" 2>/dev/null || true
  train_pid=
  grep -q '"epochs_done": 1' out/lenet/state.json || fail "lenet's checkpoint is not at epoch 1"
  [ -s out/lenet/checkpoint-e1.pt ] && [ -s out/lenet/checkpoint-e1_optimizer.pt ] ||
    fail "lenet's checkpoint files of epoch 1 are missing"
  # Restart: lenet stays paused (by name, no epoch), resnet continues; then lenet resumes.
  printf 'lenet\n' >control
  train_bg run2.log run.json
  wait_for "resnet to finish" has_event resnet released out
  has_event lenet released out && fail "lenet finished while paused"
  : >control
  wait "$train_pid" || { cat run2.log >&2; fail "the restarted run failed"; }
  train_pid=
  "$py" - out <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1] + "/events.jsonl")]
epochs = {}
for e in ev:
    if e["event"] == "epoch":
        epochs.setdefault(e["model"], []).append(e["epoch"])
# Every model epoch exactly once over the two runs: the restart went on from the checkpoint.
assert epochs == {"mlp": [0], "lenet": [0, 1, 2], "resnet": [0, 1]}, epochs
res = json.load(open(sys.argv[1] + "/results.json"))
for m in res["models"]:
    assert m["finished"] and m["epochs_done"] == len(epochs[m["name"]]), m
    assert [e["epoch"] for e in m["epochs"]] == epochs[m["name"]], m
assert [e["event"] for e in ev if e["model"] == "lenet"].count("resumed") == 1, "lenet never resumed"
print("restart ok:", {m["name"]: m["steps"] for m in res["models"]})
PY
  "$py" "$here/check_run.py" once out "$n"
  # A kill at an arbitrary moment (as a rule inside an epoch) under a sequential policy: the
  # restart redoes only the interrupted epoch. Wherever the kill lands, the checkpointed record
  # must hold every model epoch once, each with every sample once.
  write_config rr.json round-robin out-rr
  train_bg rr1.log rr.json
  wait_for "a first epoch" grep -q '"event":"epoch"' out-rr/events.jsonl
  kill -KILL "$train_pid"
  wait "$train_pid" 2>/dev/null || true
  train_pid=
  train rr.json >rr2.log 2>&1 || { cat rr2.log >&2; fail "the run restarted after SIGKILL failed"; }
  "$py" "$here/check_run.py" record out-rr "$n" '{"mlp": 1, "lenet": 3, "resnet": 2}'
}

mpirun_n() { timeout 200 "${MPIEXEC:-mpirun}" --oversubscribe -n "$@"; }
stream_flags=(--dataset="$fx/train.h5" --producer-batch=100 --threads=1 --seed=7)

case_mpi() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  write_config run.json concurrent out '{"checkpoint_every": 2}'
  expect_fail "one leader rank and one trainer rank that trains every model (mpirun -n 2), but the job has 3 ranks" \
    mpirun_n 3 "$bin" train-many run.json "${stream_flags[@]}"
  # Virtual nodes of one rank each would make both ranks leaders and train nothing.
  expect_fail "train-many under mpirun: option 'ranks_per_node' (1) does not apply" \
    mpirun_n 2 "$bin" train-many run.json "${stream_flags[@]}" --ranks-per-node=1
  # A state.json with a field of the wrong type: named, not std::terminate.
  write_config bad.json concurrent out-bad '{"checkpoint_every": 2}'
  mkdir -p out-bad/mlp
  echo '{"epochs_done": "3", "steps": 0, "finished": false, "params": 0, "epochs": []}' \
    >out-bad/mlp/state.json
  expect_fail "out-bad/mlp/state.json has a missing or malformed 'epochs_done'" \
    mpirun_n 2 "$bin" train-many bad.json "${stream_flags[@]}"
  local seed=${TRAIN_MANY_SEED:-$((RANDOM % 1000))}
  # Mid-epoch checkpoints: mlp 1 (of 4 steps), lenet 9 (3 epochs of 8), resnet 2 (2 epochs of 3).
  local k=$((1 + seed % 10))
  echo "seed $seed: SIGKILL at the first mid-epoch checkpoint from checkpoint event $k on (TRAIN_MANY_SEED=$seed replays)"
  mpirun_n 2 "$bin" train-many run.json "${stream_flags[@]}" >run1.log 2>&1 &
  train_pid=$!
  "$py" "$here/kill_mid_epoch.py" out "$k" mlp lenet resnet || { cat run1.log >&2; fail "no mid-epoch kill"; }
  if wait "$train_pid"; then fail "mpirun exited 0 after its trainer was killed"; fi
  train_pid=
  mpirun_n 2 "$bin" train-many run.json "${stream_flags[@]}" --telemetry="telemetry(hdf5=$work/mpi.h5)" \
    >run2.log 2>&1 || { cat run2.log >&2; fail "the restarted mpirun job failed"; }
  "$py" "$here/check_run.py" record out "$n" '{"mlp": 1, "lenet": 3, "resnet": 2}'
  "$py" - out killed.json "$work/mpi.h5" <<'PY'
import json, sys, h5py
out, killed, h5 = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
ev = [json.loads(l) for l in open(out + "/events.jsonl")]
res = {m["name"]: m for m in json.load(open(out + "/results.json"))["models"]}
per_epoch = {"mlp": 4, "lenet": 8, "resnet": 3}  # ceil(256 / batch size)
for name, k in killed.items():
    m = res[name]
    assert [e["steps"] for e in m["epochs"]] == [per_epoch[name]] * len(m["epochs"]), m["epochs"]
    # The model state went on: the optimizer's own step count (Adam, AdamW) is every step.
    assert m["steps"] == sum(e["steps"] for e in m["epochs"]), (name, m["steps"])
    if name != "mlp":
        assert m["epochs"][-1]["optimizer_steps"] == m["steps"], (name, m["epochs"][-1])
    if k["finished"]:
        continue
    # The restart attached at the checkpoint's stream position, inside the epoch if it was.
    att = [e for e in ev if e["event"] == "attached" and e["model"] == name][-1]
    assert att["position"] == k["position"], (name, att, k)
    assert not k["mid_epoch"] or k["position"][1] > 0, (name, k)
    # Named telemetry series of the restarted run: a point per step and per epoch it trained.
    with h5py.File(h5, "r") as f:
        g = f["rank_00001/named/model/" + name]
        steps_run2 = m["steps"] - k["steps"]
        assert g["loss"].shape == (steps_run2, 2), (name, g["loss"].shape, steps_run2)
        assert g["samples_per_s"].shape[0] == steps_run2
        assert g["epoch_loss"].shape[0] == m["epochs_done"] - k["epochs_done"], name
print("mid-epoch resume ok:", {n: (k["position"], res[n]["steps"]) for n, k in killed.items()})
PY
}

"case_$case_name"
echo "ok: $case_name"
