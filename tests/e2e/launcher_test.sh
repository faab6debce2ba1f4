#!/usr/bin/env bash
# End-to-end checks of batchcast-run on bare metal: real mpirun and torchrun-style launches of
# the test trainer (exactly-once per trainer, ranks without the leaders, a failing trainer fails
# the job), and the impossible layouts refused before anything starts.
# Usage: launcher_test.sh CASE  (LAUNCHER_RUN_BIN, LAUNCHER_CLI_BIN, LAUNCHER_TRAINER, MPIEXEC set)
set -euo pipefail
case_name=${1:?case}
run=${LAUNCHER_RUN_BIN:?}
cli=${LAUNCHER_CLI_BIN:?}
trainer=${LAUNCHER_TRAINER:?}
mpiexec=${MPIEXEC:-mpirun}
here=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# In the working directory (ctest: the build tree), not in /tmp: twice, under load on a
# machine shared with other jobs, the directory vanished from /tmp mid-test (the log shows
# getcwd failing; nothing in this test or in batchcast-run removes it).
work=$(mktemp -d "$PWD/bc-e2e-launch.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; echo "--- out.txt" >&2; cat out.txt >&2 2>/dev/null || true; exit 1; }
SAMPLES=600
make_dataset() {  # Fashion-MNIST t10k, raw; the runs use its first $SAMPLES samples
  local fm=/usr/share/datasets/fashion-mnist
  "$cli" convert idx --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
    --out d.h5 --encode raw >/dev/null
}
DATA_OPTS=(--dataset d.h5 --limit-samples $SAMPLES --batch-size 32 --epochs 2 --threads 1 --seed 7)
mpirun3() { timeout 120 "$mpiexec" --oversubscribe -n "$@"; }
expect_lines() {  # pattern count
  local n; n=$(grep -cE -- "$1" out.txt || true)
  [ "$n" -eq "$2" ] || fail "expected $2 line(s) matching '$1', got $n"
}
expect_fail() {  # expected-text command...  (must exit non-zero before starting anything)
  local want=$1; shift
  if "$@" >out.txt 2>&1; then fail "'$*' succeeded, expected failure"; fi
  grep -qF -- "$want" out.txt || fail "'$*' did not say: $want"
  grep -q "trainer-env" out.txt && fail "'$*' started a trainer before refusing the layout"
  true
}

case_mpirun_three() {
  make_dataset
  mpirun3 3 "$run" "${DATA_OPTS[@]}" -- "$trainer" --samples $SAMPLES >out.txt 2>&1 || fail "job failed"
  expect_lines "^trainer-result RANK=[01] exactly_once=ok epochs=2" 2
  expect_lines "^trainer-env RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0" 1
  expect_lines "^trainer-env RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0" 1
  expect_lines "MASTER_ADDR=$(hostname) MASTER_PORT=(29[5-9][0-9][0-9]|3[0-2][0-9][0-9][0-9])" 2
  expect_lines "BATCHCAST_ADDRESS=batchcast-run-$(id -u)-" 2
  # One leader, which produced every sample twice (2 epochs) once for both trainers.
  expect_lines "^batchcast-run: leader of node 0 .* done: .* $((2 * SAMPLES)) samples to 2 trainer" 1
}

case_python_trainer() {  # a PyTorch-style Python trainer under the launcher (docs/python.md)
  [ -n "${LAUNCHER_PYTHONPATH:-}" ] || fail "the Python module was not built (LAUNCHER_PYTHONPATH unset)"
  make_dataset
  PYTHONPATH=$LAUNCHER_PYTHONPATH mpirun3 3 -x PYTHONPATH "$run" "${DATA_OPTS[@]}" -- \
    /usr/bin/python3 "$here/launcher_python_trainer.py" $SAMPLES 2 32 >out.txt 2>&1 || fail "job failed"
  expect_lines "^python-trainer-result RANK=[01] exactly_once=ok epochs=2" 2
  expect_lines "done: .* $((2 * SAMPLES)) samples to 2 trainer" 1
}

case_mpirun_leader_trains() {
  make_dataset
  mpirun3 2 "$run" --leader-trains "${DATA_OPTS[@]}" -- "$trainer" --samples $SAMPLES >out.txt 2>&1 \
    || fail "job failed"
  expect_lines "^trainer-result RANK=[01] exactly_once=ok" 2
  expect_lines "WORLD_SIZE=2 LOCAL_WORLD_SIZE=2" 2
  expect_lines "done: .* to 2 trainer" 1
  # The leader's own trainer failing fails the leader at once, naming it.
  if mpirun3 2 "$run" --leader-trains "${DATA_OPTS[@]}" -- "$trainer" --samples $SAMPLES --fail-rank 0 \
      >out.txt 2>&1; then
    fail "the job succeeded although the leader's own trainer exited with status 3"
  fi
  grep -q "batchcast-run: trainer rank 0 (task 0 of 2 on host .*) exited with status 3" out.txt \
    || fail "no message naming the leader's own trainer"
}

case_mpirun_trainer_fails() {
  make_dataset
  if mpirun3 3 "$run" "${DATA_OPTS[@]}" -- "$trainer" --samples $SAMPLES --fail-rank 1 >out.txt 2>&1; then
    fail "the job succeeded although trainer rank 1 exited with status 3"
  fi
  grep -q "batchcast-run: trainer rank 1 (task 2 of 3 on host .*) exited with status 3: $trainer" out.txt \
    || fail "no message naming trainer rank 1 and its status"
}

# A sweep (--on-trainer-loss continue): trial 1 of three is killed (SIGKILL) mid-epoch; the
# leader detaches it, reports and counts it, and trials 0 and 2 get both epochs exactly once;
# the job ends 0 (mpirun would end the other trials at a task's non-zero exit). Without the
# policy (fail, for data-parallel jobs) the same kill fails the job.
case_mpirun_sweep_trial_killed() {
  make_dataset
  mpirun3 4 "$run" --on-trainer-loss continue "${DATA_OPTS[@]}" -- "$trainer" --samples $SAMPLES \
    --kill-rank 1 >out.txt 2>&1 || fail "the sweep failed although only trial 1 was lost"
  expect_lines "^trainer-result RANK=[02] exactly_once=ok epochs=2" 2
  expect_lines "^trainer-result RANK=1 " 0
  expect_lines "batchcast-run: leader of node 0: trainer .*rank 1.* died \(its connection closed\); detached, the other trainers go on" 1
  expect_lines "batchcast-run: trainer rank 1 .* was killed by signal 9.*a lost trial" 1
  expect_lines "^batchcast-run: leader of node 0 .* done: .* to 3 trainer\(s\), 1 of them lost: trainer .*rank 1" 1
  if mpirun3 4 "$run" "${DATA_OPTS[@]}" -- "$trainer" --samples $SAMPLES --kill-rank 1 \
      >out.txt 2>&1; then
    fail "the data-parallel job (--on-trainer-loss fail, the default) succeeded without trainer 1"
  fi
  grep -q "died (its connection closed); failing the job (--on-trainer-loss fail)" out.txt \
    || fail "no message naming the lost trainer and the policy"
  expect_fail "--on-trainer-loss 'skip' is neither 'fail'" \
    "$run" --on-trainer-loss skip "${DATA_OPTS[@]}" -- "$trainer" --samples $SAMPLES
}

# --mode shard: two trainers (a DDP job) take disjoint halves of every epoch that together
# hold every sample once (600 samples, b=32: 9 global batches of 64, then 12 each); with
# --telemetry every task (the leader and both trainers) writes its own file.
case_shard() {
  make_dataset
  mpirun3 3 "$run" "${DATA_OPTS[@]}" --mode shard --telemetry 'telemetry(json=t.json)' \
    -- "$trainer" --samples $SAMPLES >out.txt 2>&1 || fail "shard job failed"
  for f in t.node0-leader.json t.rank0.json t.rank1.json; do  # every task records telemetry
    [ -s "$f" ] || fail "--telemetry wrote no $f: $(ls)"
  done
  expect_lines "^trainer-result RANK=[01] shard=ok epochs=2 samples=600 " 2
  [ "$(cat shard-ids.0.txt shard-ids.1.txt | sort -u | wc -l)" -eq $((2 * SAMPLES)) ] ||
    fail "the two ranks' parts do not cover every sample of both epochs"
  [ "$(cat shard-ids.0.txt shard-ids.1.txt | wc -l)" -eq $((2 * SAMPLES)) ] ||
    fail "the two ranks' parts overlap"
  expect_fail "option 'world_size' (set on the command line) is not read by batchcast-run" \
    "$run" "${DATA_OPTS[@]}" --mode shard --world-size 2 -- "$trainer" --samples $SAMPLES
}

# torchrun-style: three processes with RANK/LOCAL_RANK/WORLD_SIZE/LOCAL_WORLD_SIZE set by hand,
# as a custom launcher would.
case_torchrun_style() {
  make_dataset
  local pids=() rc=0
  for r in 0 1 2; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29400 \
      TORCHELASTIC_RUN_ID="e2e$$" timeout 120 "$run" "${DATA_OPTS[@]}" -- "$trainer" --samples $SAMPLES \
      >"out.$r.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat out.0.txt out.1.txt out.2.txt >out.txt
  [ $rc -eq 0 ] || fail "a task failed"
  expect_lines "^trainer-result RANK=[01] exactly_once=ok" 2
  expect_lines "MASTER_ADDR=127.0.0.1 MASTER_PORT=" 2
  grep -q "MASTER_PORT=29400 " out.txt && fail "the trainers reuse the outer launcher's MASTER_PORT"
  grep -q "done: " out.0.txt || fail "task 0 was not the leader"
}

# An unmodified torch.distributed script starts as the trainers-only world (gloo, env://).
case_torch_ddp() {
  /usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null \
    || { echo "SKIP: no python3-torch with gloo"; return 0; }
  make_dataset
  # The DDP script itself does not read data; the test trainer runs after it in the same
  # trainer slot, so the leader's trainers still attach and the job ends normally.
  mpirun3 4 "$run" "${DATA_OPTS[@]}" -- bash -c \
    "/usr/bin/python3 $here/launcher_ddp.py && exec $trainer --samples $SAMPLES" \
    >out.txt 2>&1 || fail "job failed"
  expect_lines "^ddp RANK=[012] WORLD_SIZE=3 sum=6 " 3
  expect_lines "^trainer-result RANK=[012] exactly_once=ok" 3
}

# SIGTERM (what srun/mpirun send on cancel) ends a task promptly in every state: a trainer
# still waiting for its leader, and a leader waiting for trainers that never come.
case_signals() {
  make_dataset
  local pid
  env $(tr_env 1 2) "$run" --join-timeout 600 "${DATA_OPTS[@]}" -- "$trainer" --samples 1 >out.txt 2>&1 &
  pid=$!
  # Waits until batchcast-run itself (not the forked shell before its exec: that one blocks
  # signals too, and a TERM there ran this script's EXIT trap, which removed the work
  # directory under the test) blocks signals to wait for them.
  timeout 30 bash -c "until [ \"\$(cat /proc/$pid/comm)\" = batchcast-run ] &&
                            grep -q '^SigBlk:.*[1-9a-f]' /proc/$pid/status; do sleep 0.05; done" \
    || fail "the trainer task never reached its wait"
  kill -TERM $pid
  local rc=0; timeout 30 tail --pid=$pid -f /dev/null || fail "a waiting trainer task ignored SIGTERM"
  wait $pid || rc=$?
  [ $rc -eq 143 ] || fail "trainer task exited $rc after SIGTERM, expected 143"
  env $(tr_env 0 2) "$run" --join-timeout 600 "${DATA_OPTS[@]}" -- "$trainer" --samples 1 >out.txt 2>&1 &
  pid=$!
  timeout 30 bash -c "until grep -q '@batchcast-run-$(id -u)-lay$$-n0' /proc/net/unix; do sleep 0.05; done" \
    || fail "the leader never listened"
  kill -TERM $pid
  timeout 30 tail --pid=$pid -f /dev/null || fail "a waiting leader ignored SIGTERM"
  rc=0; wait $pid || rc=$?
  [ $rc -ne 0 ] || fail "the leader exited 0 after SIGTERM"
  grep -q "failed: batchcast-run received signal 15" out.txt || fail "the leader did not say why it stopped"
}

tr_env() {  # torchrun-style env for task R of N on one node
  echo "RANK=$1 LOCAL_RANK=$1 WORLD_SIZE=$2 LOCAL_WORLD_SIZE=$2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29400 TORCHELASTIC_RUN_ID=lay$$"
}

case_layouts() {
  make_dataset
  # A node with only its leader (one task, no --leader-trains), under mpirun.
  expect_fail "has 1 task(s), only its leader" mpirun3 1 "$run" "${DATA_OPTS[@]}" -- "$trainer" --samples 1
  # GPUs requested but absent (no nvidia-smi, no /proc/driver/nvidia here).
  expect_fail "--gpus 0 requested but host" mpirun3 3 "$run" --nvidia-smi /nonexistent --gpus 0 "${DATA_OPTS[@]}" -- "$trainer" --samples 1
  expect_fail "--mps asked for, but host" mpirun3 3 "$run" --nvidia-smi /nonexistent --mps "${DATA_OPTS[@]}" -- "$trainer" --samples 1
  expect_fail "--trainers-per-gpu 2 asked for" mpirun3 3 "$run" --nvidia-smi /nonexistent --trainers-per-gpu 2 "${DATA_OPTS[@]}" -- "$trainer" --samples 1
  # More trainers than slots: one fake GPU, 2 per GPU, 3 trainers.
  printf '#!/bin/sh\necho "GPU 0: Fake GPU (UUID: GPU-f00d)"\n' >smi.sh && chmod +x smi.sh
  expect_fail "3 trainers but only 2 slots" mpirun3 4 "$run" --nvidia-smi ./smi.sh --trainers-per-gpu 2 "${DATA_OPTS[@]}" -- "$trainer" --samples 1
  # Usage errors.
  expect_fail "no trainer command" env $(tr_env 1 3) "$run" "${DATA_OPTS[@]}"
  expect_fail "unexpected word '--no-such-flag'" env $(tr_env 1 3) "$run" --no-such-flag -- true
  expect_fail "no dataset" env $(tr_env 0 3) "$run" -- true
  expect_fail "mpirun --map-by slot" env OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=0 \
    OMPI_COMM_WORLD_LOCAL_SIZE=2 "$run" --dry-run
  # A missing dataset fails the leader, and its trainers say where to look instead of hanging.
  expect_fail "could not start" mpirun3 3 "$run" --join-timeout 20 --dataset missing.h5 -- "$trainer" --samples 1
}

case_gpu_placement() {
  cat >smi.sh <<'SMI'
#!/bin/sh
echo "GPU 0: Fake A100 (UUID: GPU-aaaa)"
echo "  MIG 3g.20gb     Device  0: (UUID: MIG-a0)"
echo "  MIG 3g.20gb     Device  1: (UUID: MIG-a1)"
echo "GPU 1: Fake A100 (UUID: GPU-bbbb)"
SMI
  chmod +x smi.sh
  mpirun3 5 "$run" --dry-run --nvidia-smi ./smi.sh --trainers-per-gpu 2 >out.txt 2>&1 || fail "dry run failed"
  expect_lines "role=leader trainer_rank=-1 .* gpu=- " 1
  expect_lines "trainer_rank=[02] world=4 .* gpu=GPU-aaaa " 2
  expect_lines "trainer_rank=[13] world=4 .* gpu=GPU-bbbb " 2
  mpirun3 3 "$run" --dry-run --nvidia-smi ./smi.sh --gpus MIG-a1,MIG-a0 >out.txt 2>&1 || fail "MIG dry run failed"
  expect_lines "trainer_rank=0 .* gpu=MIG-a1 " 1
  expect_lines "trainer_rank=1 .* gpu=MIG-a0 " 1
  expect_fail "'MIG-zz' is not on host" mpirun3 3 "$run" --dry-run --nvidia-smi ./smi.sh --gpus MIG-zz
}

# MPS with a stand-in nvidia-cuda-mps-control that records its calls: started once per node
# before the trainers, stopped after them, and the trainers get the pipe directory.
case_mps_fake() {
  make_dataset
  printf '#!/bin/sh\necho "GPU 0: Fake GPU (UUID: GPU-f00d)"\n' >smi.sh
  cat >mps.sh <<MPS
#!/bin/sh
if [ "\$1" = "-d" ]; then echo "start \$CUDA_MPS_PIPE_DIRECTORY" >>$work/mps.log; else read cmd; echo "\$cmd \$CUDA_MPS_PIPE_DIRECTORY" >>$work/mps.log; fi
MPS
  chmod +x smi.sh mps.sh
  mpirun3 3 "$run" --nvidia-smi ./smi.sh --mps-control ./mps.sh --mps --trainers-per-gpu 2 "${DATA_OPTS[@]}" \
    -- "$trainer" --samples $SAMPLES >out.txt 2>&1 || fail "MPS job failed"
  expect_lines "^trainer-result RANK=[01] exactly_once=ok" 2
  local pipe="/tmp/batchcast-mps-$(id -u)-"
  expect_lines "CUDA_VISIBLE_DEVICES=GPU-f00d CUDA_MPS_PIPE_DIRECTORY=$pipe" 2
  [ "$(wc -l <mps.log)" -eq 2 ] || fail "expected one start and one quit: $(cat mps.log)"
  head -1 mps.log | grep -q "^start $pipe" || fail "MPS was not started first: $(cat mps.log)"
  tail -1 mps.log | grep -q "^quit $pipe" || fail "MPS was not stopped: $(cat mps.log)"
  local dir; dir=$(awk '{print $2}' mps.log | head -1)
  [ ! -e "$dir" ] && [ ! -e "$dir-log" ] || fail "the MPS directories $dir(-log) were left behind"
}

# The run directory (issue 32): the leader task and both trainers each write their own file,
# named by the one rule, and `batchcast report` finds each trainer in the leader's ledger and
# matches it to its file; an unwritable path stops the leader task before it listens (so no
# trainer starts), naming the path and the cause.
case_telemetry_dir() {
  make_dataset
  mpirun3 3 "$run" "${DATA_OPTS[@]}" --telemetry "telemetry(dir=$work/run,interval=100ms)" \
    -- "$trainer" --samples $SAMPLES >out.txt 2>&1 || fail "job with telemetry dir failed"
  [ "$(ls run/leader-*.h5 | wc -l)" -eq 1 ] || fail "no leader file in the run directory: $(ls run)"
  [ "$(ls run/trainer-*.h5 | wc -l)" -eq 2 ] || fail "not one file per trainer: $(ls run)"
  "$cli" report run --out report >report.txt 2>&1 || { cat report.txt >&2; fail "report failed"; }
  /usr/bin/python3 - report/report-data.json $SAMPLES <<'PY' || fail "the report's trials are wrong"
import json, sys
run, samples = json.load(open(sys.argv[1]))[0], int(sys.argv[2])
assert len(run["trials"]) == 2, run["trials"]
for t in run["trials"]:
    assert t["own"] is not None and t["own"]["samples_received"] == 2 * samples, t
    assert t["samples"] == 2 * samples and t["leader_cpu_s"] is not None, t
assert run["job"]["processes"] == 3 and not run["unfinished"], run["job"]
PY
  echo x >plain
  expect_fail "telemetry hdf5 file $work/plain/run" \
    mpirun3 3 "$run" "${DATA_OPTS[@]}" --telemetry "hdf5=$work/plain/run.h5" -- "$trainer" \
    --samples $SAMPLES
  grep -q "Not a directory" out.txt || fail "the refusal does not give the cause"
}

"case_$case_name"
echo "PASS: $case_name"
