#!/usr/bin/env bash
# Really multi-host (label mpi): two fake hosts as network namespaces with their own
# hostnames on a bridge, MPI over TCP between them, both multi-node modes through
# tests/mpi's checker (mpi_multinode). The namespaces are made and removed here (trap);
# every wait is bounded by timeout.
# Usage: multinode_netns_test.sh MPIEXEC MPI_MULTINODE MAKE_PHOTO_DATASET DATA_DIR
# Exit 77 (ctest: skipped) without root or without ip/unshare.
set -uo pipefail
mpiexec=$1 prog=$2 makeset=$3 data=$4
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
  echo "SKIP: needs root, ip and unshare to make network namespaces"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/bc-netns-multi.XXXXXX)
# The recipe of ../shared/ENVIRONMENT.md as in tests/slurm/slurm_cluster.sh (_make_netns),
# with this test's own bridge, subnet, host names and /etc/hosts marker, so that it can run
# beside the Slurm test without touching its namespaces or its /etc/hosts lines.
BRIDGE=bcmn0 SUBNET=10.77.11 HOSTS=(bcmn1 bcmn2) MARK="# batchcast-multinode-test"
remove_netns() {
  for h in "${HOSTS[@]}"; do
    ip link del "v$h" 2>/dev/null
    ip netns del "$h" 2>/dev/null
  done
  ip link del "$BRIDGE" 2>/dev/null
  sed -i "/$MARK\$/d" /etc/hosts
  return 0
}
make_netns() {
  remove_netns  # leftovers of a killed earlier run
  ip link add "$BRIDGE" type bridge && ip addr add "$SUBNET.1/24" dev "$BRIDGE" &&
    ip link set "$BRIDGE" up || return 1
  local i=0
  for h in "${HOSTS[@]}"; do
    i=$((i + 1))
    ip netns add "$h" && ip link add "v$h" type veth peer name eth0 netns "$h" &&
      ip link set "v$h" master "$BRIDGE" up && ip -n "$h" addr add "$SUBNET.1$i/24" dev eth0 &&
      ip -n "$h" link set eth0 up && ip -n "$h" link set lo up || return 1
    echo "$SUBNET.1$i $h $MARK" >>/etc/hosts
  done
}
cleanup() { remove_netns; rm -rf "$work"; }
trap cleanup EXIT
make_netns || { echo "FAIL: could not create the network namespaces"; exit 1; }

# The rsh agent: enter the host's namespace, take its hostname (own UTS), run the command.
cat >"$work/agent.sh" <<'AGENT'
#!/bin/sh
host=$1; shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host; exec sh -c \"\$0\"" "$*"
AGENT
chmod +x "$work/agent.sh"

mkdir -p "$data"
good=$data/photos-240.h5
[ -f "$good" ] || "$makeset" "$good" --images 240 --width 64 --height 48 || exit 1
status=0
for mode in shard replicate; do
  log=$work/$mode.log
  echo "+ mpirun --host bcmn1:3,bcmn2:2 -n 5 mpi_multinode --mode=$mode (TCP between hosts)"
  timeout -k 5 150 "$mpiexec" --oversubscribe --bind-to none --host bcmn1:3,bcmn2:2 -n 5 \
    --mca plm_rsh_agent "$work/agent.sh" --mca oob_tcp_if_include "$SUBNET.0/24" \
    --mca btl_tcp_if_include "$SUBNET.0/24" --mca btl tcp,vader,self \
    "$prog" --dataset="$good" --image_size=32 --crop=random --flip --seed=5 --threads=1 \
    --limit_samples=117 --epochs=2 --batch_size=8 --producer_batch=24 --mode="$mode" \
    --heartbeat_ms=30s >"$log" 2>&1
  rc=$?
  cat "$log"
  if [ "$rc" -eq 124 ]; then echo "FAIL $mode: timed out (a hang)"; status=1; continue; fi
  # Two hosts: nodes 0 and 1 must both appear, i.e. the node split saw two hostnames.
  if [ "$rc" -ne 0 ] || ! grep -q "^PASS mpi_multinode mode=$mode" "$log" ||
     ! grep -q "node 1)" "$log"; then
    echo "FAIL $mode: mpirun exited with $rc"
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "PASS multinode over two network-namespace hosts (shard, replicate)"
exit "$status"
