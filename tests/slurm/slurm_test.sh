#!/usr/bin/env bash
# batchcast-run on a real Slurm cluster started by this script (label slurm).
# Usage: slurm_test.sh one_node|two_node
#   one_node: slurmctld + slurmd on this host; srun (3 trainers, exactly-once, roles, ranks),
#             a failing trainer fails the step with a message naming it, and
#             `sbatch --wait slurm/sweep_one_node.sbatch`.
#   two_node: two network-namespace hosts; srun -N2 (ranks renumbered across nodes,
#             MASTER_ADDR = node 0, one leader per node) and both multi-node sbatch templates.
# Needs root (daemons, namespaces). Installs its packages with scripts/slurm_deps.sh.
set -euo pipefail
case_name=${1:?case}
src=${LAUNCHER_SOURCE_DIR:?}
run=${LAUNCHER_RUN_BIN:?}
cli=${LAUNCHER_CLI_BIN:?}
trainer=${LAUNCHER_TRAINER:?}
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "SKIP: the Slurm tests start daemons and need root"; exit 0; }
timeout 600 "$src/scripts/slurm_deps.sh"

work=$(mktemp -d /tmp/bc-slurm-test.XXXXXX)
export SLURM_TEST_DIR=$work/cluster
mkdir -p "$SLURM_TEST_DIR"
# shellcheck source=slurm_cluster.sh
source "$here/slurm_cluster.sh"
cleanup() { cluster_stop; rm -rf "$work"; }
trap cleanup EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; echo "--- out.txt" >&2; cat out.txt >&2 2>/dev/null || true;
         tail -n 30 "$SLURM_TEST_DIR"/log/*.log >&2 2>/dev/null || true; exit 1; }
expect_lines() {  # pattern count [file]
  local n; n=$(grep -cE -- "$1" "${3:-out.txt}" || true)
  [ "$n" -eq "$2" ] || fail "expected $2 line(s) matching '$1' in ${3:-out.txt}, got $n"
}
SAMPLES=512
fm=/usr/share/datasets/fashion-mnist
"$cli" convert idx --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
  --out "$work/d.h5" --encode raw >/dev/null
chmod -R a+rX "$work"
OPTS=(--dataset "$work/d.h5" --limit-samples $SAMPLES --batch-size 32 --epochs 2 --threads 1)
TRAIN="$trainer --samples $SAMPLES"

case_one_node() {
  cluster_start_one
  timeout 120 srun --mpi=pmix -N1 -n4 "$run" "${OPTS[@]}" -- $TRAIN >out.txt 2>&1 || fail "srun failed"
  expect_lines "^trainer-result RANK=[012] exactly_once=ok epochs=2" 3
  for r in 0 1 2; do
    expect_lines "^trainer-env RANK=$r LOCAL_RANK=$r WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 MASTER_ADDR=$(hostname) " 1
  done
  expect_lines "BATCHCAST_ADDRESS=batchcast-run-0-[0-9]+\.[0-9]+-n0 " 3
  expect_lines "^batchcast-run: leader of node 0 \(task 0 of 4 .* done: .* $((2 * SAMPLES)) samples to 3 trainer" 1

  # A trainer that dies fails the step, with a message naming it; the leader says why it stopped.
  if timeout 120 srun --mpi=pmix -N1 -n4 "$run" "${OPTS[@]}" -- $TRAIN --fail-rank 2 >out.txt 2>&1; then
    fail "srun succeeded although trainer rank 2 exited with status 3"
  fi
  grep -qE "batchcast-run: trainer rank 2 \(task 3 of 4 on host .*\) exited with status 3" out.txt \
    || fail "no message naming trainer rank 2"
  grep -qE "leader of node 0 .* failed: trainer consumer [0-9]+ \(rank 2" out.txt \
    || fail "the leader did not name the dead trainer"

  # The sweep template, as a user submits it (2 epochs of 3 trials).
  timeout 180 sbatch --wait -o sweep.out -n 4 \
    --export=ALL,DATASET="$work/d.h5",BATCHCAST_RUN="$run",EPOCHS=2,BATCH_SIZE=32,EXTRA_OPTS="--limit-samples $SAMPLES --threads 1",TRAIN="$TRAIN" \
    "$src/slurm/sweep_one_node.sbatch" >sbatch.txt 2>&1 || { cat sbatch.txt sweep.out >out.txt; fail "sweep job failed"; }
  expect_lines "^trainer-result RANK=[012] exactly_once=ok epochs=2" 3 sweep.out
}

case_two_node() {
  cluster_start_two
  timeout 120 srun --mpi=pmix -N2 --ntasks-per-node=3 "$run" "${OPTS[@]}" -- $TRAIN >out.txt 2>&1 \
    || fail "srun -N2 failed"
  expect_lines "^trainer-result RANK=[0-3] exactly_once=ok epochs=2" 4
  expect_lines "^trainer-env RANK=[01] LOCAL_RANK=[01] WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 MASTER_ADDR=bcs1 .* host=bcs1$" 2
  expect_lines "^trainer-env RANK=[23] LOCAL_RANK=[01] WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 MASTER_ADDR=bcs1 .* host=bcs2$" 2
  expect_lines "^trainer-env RANK=2 LOCAL_RANK=0 " 1
  expect_lines "^batchcast-run: leader of node [01] .* done: .* to 2 trainer" 2
  # Uneven nodes: 4 tasks on one, 2 on the other -> 3 + 1 trainers.
  printf 'bcs1\nbcs1\nbcs1\nbcs1\nbcs2\nbcs2\n' >hosts.txt
  SLURM_HOSTFILE=$work/hosts.txt timeout 120 srun --mpi=pmix -N2 -n6 --distribution=arbitrary \
    "$run" "${OPTS[@]}" -- $TRAIN >out.txt 2>&1 || fail "uneven srun failed"
  expect_lines "^trainer-result RANK=[0-3] exactly_once=ok" 4
  expect_lines "WORLD_SIZE=4 LOCAL_WORLD_SIZE=3 GROUP_RANK=0" 3
  expect_lines "WORLD_SIZE=4 LOCAL_WORLD_SIZE=1 GROUP_RANK=1" 1

  # An unmodified torch.distributed script rendezvous across the two hosts on the exported
  # MASTER_ADDR/MASTER_PORT (gloo over the veths), then the test trainer consumes the stream.
  if /usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null; then
    timeout 150 srun --mpi=pmix -N2 --ntasks-per-node=2 "$run" "${OPTS[@]}" -- bash -c \
      "/usr/bin/python3 $src/tests/e2e/launcher_ddp.py && exec $TRAIN" >out.txt 2>&1 || fail "DDP srun failed"
    expect_lines "^ddp RANK=0 WORLD_SIZE=2 sum=3 host=bcs1$" 1
    expect_lines "^ddp RANK=1 WORLD_SIZE=2 sum=3 host=bcs2$" 1
    expect_lines "^trainer-result RANK=[01] exactly_once=ok" 2
  else
    echo "note: python3-torch with gloo missing; skipped the cross-host DDP rendezvous"
  fi

  local export_vars="ALL,DATASET=$work/d.h5,BATCHCAST_RUN=$run,EPOCHS=2,BATCH_SIZE=32,TRAIN=$TRAIN"
  timeout 180 sbatch --wait -o ddp.out -N2 --ntasks-per-node=3 \
    --export="$export_vars,EXTRA_OPTS=--limit-samples $SAMPLES --threads 1" \
    "$src/slurm/data_parallel.sbatch" >sbatch.txt 2>&1 || { cat sbatch.txt ddp.out >out.txt; fail "data-parallel job failed"; }
  expect_lines "^trainer-result RANK=[0-3] exactly_once=ok epochs=2" 4 ddp.out
  expect_lines "^trainer-result .* host=bcs2$" 2 ddp.out
  timeout 180 sbatch --wait -o sweep.out -N2 --ntasks-per-node=3 \
    --export="$export_vars,EXTRA_OPTS=--limit-samples $SAMPLES --threads 1" \
    "$src/slurm/sweep_multi_node.sbatch" >sbatch.txt 2>&1 || { cat sbatch.txt sweep.out >out.txt; fail "multi-node sweep job failed"; }
  expect_lines "^trainer-result RANK=[0-3] exactly_once=ok epochs=2" 4 sweep.out
}

"case_$case_name"
echo "PASS: $case_name"
