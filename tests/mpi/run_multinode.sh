#!/usr/bin/env bash
# Shard and replicate mode across virtual nodes (ranks_per_node) under one real
# `mpirun --oversubscribe` (label mpi). Usage:
#   run_multinode.sh MPIEXEC MPI_MULTINODE MAKE_PHOTO_DATASET DATA_DIR CASE
# CASE: shard_2 shard_3 replicate_2 replicate_3 shard_unequal_b thread_single
#       replicate_skip_2 replicate_skip_3 shard_short_last replicate_slow_node
#       replicate_leader_killed replicate_ucx_2 replicate_early_end replicate_decode_error
#       replicate_resize_2 replicate_resize_3 replicate_resize_leave_slow
#       replicate_resize_mismatch shard_resize_refused
#       shard_resume replicate_resume shard_no_good_sample
# Layouts (leader = first rank of each virtual node; the others train):
#   2 nodes: -n 7, ranks_per_node=4 -> 3 + 2 trainers;  3 nodes: -n 8, ranks_per_node=3 -> 2+2+1.
set -uo pipefail
mpiexec=$1 prog=$2 makeset=$3 data=$4 case=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$data"
good=$data/photos-240.h5
[ -f "$good" ] || "$makeset" "$good" --images 240 --width 64 --height 48 || exit 1
bad=$data/photos-240-corrupt37.h5  # sample 37 is a truncated JPEG
allbad=$data/photos-240-allbad.h5  # every sample is a truncated JPEG
[ "$case" = shard_no_good_sample ] && { [ -f "$allbad" ] || "$makeset" "$allbad" --images 240 \
  --width 64 --height 48 --corrupt-from 0 || exit 1; }
case "$5" in replicate_skip_* | replicate_decode_error)
  [ -f "$bad" ] || "$makeset" "$bad" --images 240 --width 64 --height 48 --corrupt-index 37 \
    || exit 1 ;;
esac
log=$(mktemp /tmp/bc_mpi_multinode_XXXXXX)
trap 'rm -f "$log"' EXIT
job="mpimulti-$case-$$"
# 229 samples: the last global / producer batch of every epoch is partial.
common=(--dataset="$good" --image_size=32 --crop=random --flip --seed=11 --threads=1
        --limit_samples=229 --epochs=2 --batch_size=8 --job_id="$job" --heartbeat_ms=30s)

fail() { echo "FAIL $case: $*"; echo "--- output ---"; cat "$log"; exit 1; }
run() {  # run SECONDS MPIRUN-ARGS...: output in $log, status in $rc
  local secs=$1
  shift
  echo "+ mpirun $*"
  local start=$SECONDS
  timeout -k 5 "$secs" "$mpiexec" --oversubscribe --bind-to none "$@" >"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ $((SECONDS - start)) -ge "$secs" ]; }; then
    fail "timed out after ${secs}s (a hang, not a fast failure)"
  fi
  echo "mpirun exited with $rc after $((SECONDS - start)) s"
}
expect_pass() {
  [ "$rc" -eq 0 ] || fail "mpirun exited with $rc"
  grep -q "^PASS mpi_multinode" "$log" || fail "no PASS line"
  cat "$log"
}
expect_fail() {
  [ "$rc" -ne 0 ] || fail "the job succeeded but should have failed"
  grep -qE "$1" "$log" || fail "expected a line matching '$1'"
  grep -E "$1" "$log" | head -n 1
}

case "$case" in
  shard_2) run 150 -n 7 "$prog" "${common[@]}" --mode=shard --ranks_per_node=4 && expect_pass ;;
  shard_resume | replicate_resume)
    # Resume at a random position (printed): 5 trainers on 2 virtual nodes; shard: 6 global
    # batches of 5 x 8 per epoch; replicate: 29 batches of 8 per trainer, producer batch 24
    # (the position usually lies inside a producer batch, whose head the trainers skip).
    # (start_batch >= 1: a real resume point; the leader must start there.)
    e=$((RANDOM % 2))
    if [ "$case" = shard_resume ]; then b=$((1 + RANDOM % 5)); mode=(--mode=shard)
    else b=$((1 + RANDOM % 28)); mode=(--mode=replicate --producer_batch=24); fi
    echo "resume at start_epoch=$e start_batch=$b"
    run 150 -n 7 "$prog" "${common[@]}" "${mode[@]}" --ranks_per_node=4 --start_epoch=$e \
      --start_batch=$b && expect_pass ;;
  shard_3) run 150 -n 8 "$prog" "${common[@]}" --mode=shard --ranks_per_node=3 && expect_pass ;;
  replicate_2)
    run 150 -n 7 "$prog" "${common[@]}" --mode=replicate --producer_batch=24 --ranks_per_node=4 \
      && expect_pass ;;
  replicate_3)
    run 150 -n 8 "$prog" "${common[@]}" --mode=replicate --producer_batch=24 --ranks_per_node=3 \
      && expect_pass ;;
  replicate_skip_2 | replicate_skip_3)
    # Sample 37 is corrupt and on_bad_sample=skip: the node whose share holds it skips it
    # (once per epoch, on one node only), every node publishes the same compacted batch
    # (trainers compare per-batch signatures), every other sample arrives exactly once.
    if [ "$case" = replicate_skip_2 ]; then layout=(-n 7); rpn=4; else layout=(-n 8); rpn=3; fi
    MULTINODE_TEST_BAD_SAMPLE=37 run 150 -x MULTINODE_TEST_BAD_SAMPLE "${layout[@]}" "$prog" \
      "${common[@]}" --dataset="$bad" --on_bad_sample=skip --mode=replicate --producer_batch=24 \
      --ranks_per_node=$rpn && expect_pass
    # Each leader reports its skips once at the end, per epoch: summed over the leaders,
    # sample 37 was skipped once per epoch (by whichever node decoded it that epoch).
    summary=$(grep "multinode leader: [0-9]* bad samples skipped" "$log" || true)
    sum() { grep -o "$1" <<<"$summary" | awk '{s += $NF} END {print s + 0}'; }
    total=$(sum "leader: [0-9]*")
    e0=$(sum "epoch 0: [0-9]*"); e1=$(sum "epoch 1: [0-9]*")
    [ "$total" -eq 2 ] && [ "$e0" -eq 1 ] && [ "$e1" -eq 1 ] || fail "sample 37 was skipped \
$total times over 2 epochs (epoch 0: $e0, epoch 1: $e1; expected once per epoch, by one node)" ;;
  replicate_early_end)
    # Every trainer leaves after 5 batches of 2 x 29: the leaders see no consumer left on
    # any node through the flags of the exchange, agree to end, and the job ends cleanly.
    MULTINODE_TEST_STOP_AFTER=5 BATCHCAST_DEBUG=info run 150 -x MULTINODE_TEST_STOP_AFTER \
      -x BATCHCAST_DEBUG -n 7 "$prog" "${common[@]}" --mode=replicate --producer_batch=24 \
      --ranks_per_node=4 && expect_pass
    ended=$(grep -c "no consumer left on any node after producer batch" "$log")
    [ "$ended" -eq 2 ] || fail "$ended of 2 node leaders ended early by agreement" ;;
  replicate_decode_error)
    # Sample 37 is corrupt and on_bad_sample=error: the node that decodes it fails with the
    # decode error; the other node fails too, naming the failing leader's node and rank,
    # after both drained their exchanges (no hang). Both lines are always there: the leaders
    # print before any of them fails its ring (they stop together, docs/multinode.md).
    run 150 -n 7 "$prog" "${common[@]}" --dataset="$bad" --on_bad_sample=error \
      --mode=replicate --producer_batch=24 --ranks_per_node=4
    expect_fail "sample 37 .*jpeg decode failed"
    expect_fail "multinode leader: node leader [01] \(rank [04]\) failed" ;;
  shard_no_good_sample)
    # Every sample is corrupt and on_bad_sample=skip, in shard mode: each node leader reads
    # only its trainers' shard, skips all of it, and at the end of epoch 0 fails the stream
    # naming the epoch and its shard (node, trainers' ranks): an error, never a hang.
    run 150 -n 7 "$prog" "${common[@]}" --dataset="$allbad" --on_bad_sample=skip --mode=shard \
      --ranks_per_node=4
    expect_fail "node [01]'s shard \(trainers at world ranks [0-9, ]+\): multinode leader: \
epoch 0 has no good sample" ;;
  replicate_resize_2 | replicate_resize_3)
    # Progressive resizing across 2 / 3 virtual nodes, 5 epochs of 229 samples, three sizes
    # (16, 24, 32 px; producer batches of 96, 42 and 24 samples): every trainer gets what a
    # consumer of one node's leader with this schedule gets (multinode_mpi.cc CheckResized:
    # resize_checks.h, the schedule's order and sizes, every sample's pixels against a
    # reference decode at its scheduled size, exactly once per epoch). 2 nodes: mixed mode,
    # linear LR; 3 nodes: exhaustive mode (epochs of fewer than 229 samples), sqrt LR and
    # max_batch=20 (consumer batches of 32 capped at 20; producer batches of 80 at 16 px).
    if [ "$case" = replicate_resize_2 ]; then
      layout=(-n 7); rpn=4; spec="resize(sizes=16:24:32,upgrade=0.4)"
    else
      layout=(-n 8); rpn=3; spec="resize(sizes=16:24:32,upgrade=0.4,mode=exhaustive,lr=sqrt,max_batch=20)"
    fi
    run 200 "${layout[@]}" "$prog" "${common[@]}" --epochs=5 --resize="$spec" --mode=replicate \
      --producer_batch=24 --ranks_per_node=$rpn && expect_pass
    # One plan per job on stdout (node 0's leader), as on one node.
    plans=$(grep -c "^batchcast: progressive resizing resize(" "$log")
    [ "$plans" -eq 1 ] || fail "the plan was printed $plans times (expected once, by node 0)" ;;
  replicate_resize_leave_slow)
    # The schedule of replicate_resize_2, 5 epochs, where epoch 4 is its final phase (every
    # sample steps up to 32 px): trainer rank 6 (node 1) leaves after its first batch of
    # epoch 4, while rank 2 (node 0) trains 10x slower than the others. Rank 6 is checked up
    # to there (whole epochs 0-3 as in replicate_resize_2; in epoch 4 the schedule's first
    # samples at 32 px, byte for byte); every other trainer, node 1's other one included,
    # still gets every sample of every epoch exactly once at its size, byte for byte.
    MULTINODE_TEST_STEP_US=2000 MULTINODE_TEST_SLOW_RANK=2 MULTINODE_TEST_LEAVE_RANK=6 \
      MULTINODE_TEST_LEAVE_EPOCH=4 run 200 -x MULTINODE_TEST_STEP_US -x MULTINODE_TEST_SLOW_RANK \
      -x MULTINODE_TEST_LEAVE_RANK -x MULTINODE_TEST_LEAVE_EPOCH -n 7 "$prog" "${common[@]}" \
      --epochs=5 --resize="resize(sizes=16:24:32,upgrade=0.4)" --mode=replicate \
      --producer_batch=24 --ranks_per_node=4 && expect_pass
    grep -q "rank 6 (trainer [0-9]*, node 1): .* left in epoch 4 ok" "$log" \
      || fail "rank 6 did not leave in epoch 4" ;;
  replicate_resize_mismatch)
    # Node 1 is given another schedule (MPMD): the node leaders plan different producer
    # batches. Each checks the sizes in every other node's metadata against its own plan,
    # so both fail at the first batch naming both plans, instead of reading its bytes.
    run 60 -n 3 "$prog" "${common[@]}" --resize="resize(sizes=16:32,upgrade=0.5)" \
      --mode=replicate --producer_batch=24 --ranks_per_node=3 : \
      -n 3 "$prog" "${common[@]}" --resize="resize(sizes=24:32,upgrade=0.5)" \
      --mode=replicate --producer_batch=24 --ranks_per_node=3
    expect_fail "node leader 1 \(rank 3\) sent producer batch 0 of epoch 0: .* at image size 24 .*but node 0's plan has producer batch 0 of epoch 0: .* at image size 16 .*the node leaders plan different streams"
    expect_fail "node leader 0 \(rank 0\) sent producer batch 0 of epoch 0: .* at image size 16 .*but node 1's plan has .* at image size 24" ;;
  shard_resize_refused)
    # Shard mode does not run a schedule: every rank fails at start-up with the front-door
    # table's refusal (docs/configuration.md), naming the cause and what to do.
    run 60 -n 6 "$prog" "${common[@]}" --resize="resize(min=16,max=32,step=16)" \
      --mode=shard --ranks_per_node=3
    expect_fail "multi-node leader: option 'resize' \(set on the command line\) is not read by multi-node leader with mode=shard: .*parts scaled per size are not planned\. Use mode=replicate"
    n=$(grep -c "runtime create failed: .*multi-node leader: option 'resize'" "$log")
    [ "$n" -eq 6 ] || fail "$n of 6 ranks refused the schedule at start-up" ;;
  replicate_ucx_2)
    # The same as replicate_2 with Open MPI's UCX pml selected (no RDMA device here: the
    # two 'any' settings let UCX use shared memory / TCP).
    run 150 --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any -n 7 "$prog" \
      "${common[@]}" --mode=replicate --producer_batch=24 --ranks_per_node=4 && expect_pass ;;
  shard_short_last)
    # 203 samples over 5 trainers x b=8: the last global batch has 3 samples, fewer than
    # trainers; trainers 3 and 4 get no batch for it, the union is still exactly once.
    run 150 -n 7 "$prog" "${common[@]}" --limit_samples=203 --mode=shard --ranks_per_node=4 \
      && expect_pass ;;
  replicate_slow_node)
    # Rank 5 (node 1) trains 10x slower: through the bounded rings and the exchange window
    # the other node runs at its pace, never more than ring_slots (4) producer batches ahead
    # of it, and no leader's RSS grows.
    MULTINODE_TEST_STEP_US=2000 MULTINODE_TEST_SLOW_RANK=5 MULTINODE_TEST_MAX_LEAD=4 \
      run 150 -x MULTINODE_TEST_STEP_US -x MULTINODE_TEST_SLOW_RANK -x MULTINODE_TEST_MAX_LEAD \
      -n 7 "$prog" "${common[@]}" --epochs=3 --mode=replicate --producer_batch=24 \
      --buffer_depth=2 --ranks_per_node=4 && expect_pass ;;
  replicate_leader_killed)
    # Node 1's leader (rank 4) is SIGKILLed mid-stream by its trainer: the job must end
    # with an error naming rank 4, not hang.
    MULTINODE_TEST_KILL_RANK=4 MULTINODE_TEST_KILL_AFTER=3 run 60 -x MULTINODE_TEST_KILL_RANK \
      -x MULTINODE_TEST_KILL_AFTER -n 7 "$prog" "${common[@]}" --mode=replicate \
      --producer_batch=24 --ranks_per_node=4
    # Either report is correct and both name rank 4 (docs/multinode.md): mpirun names the
    # killed rank's signal, or a trainer of its node exits first, having printed that its
    # leader is gone (mpirun then reports that trainer's exit code instead).
    grep -q "kills rank 4" "$log" || fail "the leader was not killed"
    expect_fail "rank 4 .*(exited on signal 9|died)|leader \(rank 4, pid [0-9]+, host [^)]*\) is gone" ;;
  shard_unequal_b)
    run 60 -n 4 "$prog" "${common[@]}" --mode=shard --ranks_per_node=2 : \
      -n 3 "$prog" "${common[@]}" --mode=shard --ranks_per_node=2 --batch_size=6
    expect_fail "runtime create failed: shard mode needs the same batch_size on every trainer" ;;
  thread_single)
    MULTINODE_TEST_THREAD_LEVEL=single run 60 -x MULTINODE_TEST_THREAD_LEVEL -n 6 "$prog" \
      "${common[@]}" --mode=replicate --ranks_per_node=3
    expect_fail "runtime create failed: replicate mode across 2 nodes .* needs MPI_THREAD_MULTIPLE" ;;
  *) echo "run_multinode.sh: unknown case '$case'" >&2; exit 2 ;;
esac
ls /dev/shm | grep -q "$job" && fail "a /dev/shm entry carries this job's id $job"
echo "PASS $case"
