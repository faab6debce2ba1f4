#!/usr/bin/env bash
# A real Slurm cluster on this machine, for tests (sourced by slurm_test.sh).
#   cluster_start_one   munge + slurmctld + one slurmd (this host, CPUs=8 declared)
#   cluster_start_two   munge + slurmctld + two slurmd in network-namespace hosts bcs1, bcs2
#   cluster_stop        stops every daemon this script started and removes the namespaces
# No systemd: daemons are started directly, state under $SLURM_TEST_DIR; every wait is bounded.
# Follows ../shared/ENVIRONMENT.md ("Slurm on one machine", "Real multi-node").
set -euo pipefail

SLURM_TEST_DIR=${SLURM_TEST_DIR:-$(mktemp -d /tmp/bc-slurm.XXXXXX)}
export SLURM_CONF=$SLURM_TEST_DIR/slurm.conf
CTLD_PORT=${CTLD_PORT:-16817}
SLURMD_PORT=${SLURMD_PORT:-16818}
BRIDGE=bcsl0
SUBNET=10.77.9
NS_HOSTS=(bcs1 bcs2)
_started_munge=0
_netns_made=0

log() { echo "[slurm-cluster] $*" >&2; }

_start_munge() {
  if [ -S /run/munge/munge.socket.2 ] && munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    return 0  # already running (another test, or the host's)
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  [ -f /etc/munge/munge.key ] || mungekey --create >/dev/null 2>&1 || /usr/sbin/create-munge-key -f
  runuser -u munge -- /usr/sbin/munged
  _started_munge=1
  timeout 10 sh -c 'until munge -n </dev/null | unmunge >/dev/null 2>&1; do sleep 0.1; done' \
    || { log "munged did not come up"; return 1; }
}

_write_conf() {  # ctld_host ctld_addr node_lines...
  local ctld_host=$1 ctld_addr=$2; shift 2
  local d=$SLURM_TEST_DIR
  mkdir -p "$d/state" "$d/log" "$d/tmp"
  cat >"$SLURM_CONF" <<CONF
ClusterName=bctest
SlurmctldHost=${ctld_host}${ctld_addr:+($ctld_addr)}
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool-%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd-%n.log
TmpFS=$d/tmp
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
KillOnBadExit=1
InactiveLimit=0
MinJobAge=300
$(printf '%s\n' "$@")
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
}

_wait_idle() {  # count
  timeout 30 bash -c "until [ \"\$(sinfo -h -t idle -o '%D' 2>/dev/null | awk '{s+=\$1} END {print s+0}')\" -ge $1 ]; do sleep 0.2; done" \
    || { log "nodes did not become idle"; sinfo -N -l >&2 || true; tail -n 20 "$SLURM_TEST_DIR"/log/*.log >&2; return 1; }
}

cluster_start_one() {
  _start_munge
  local h; h=$(hostname)
  _write_conf "$h" "" "NodeName=$h CPUs=8 State=UNKNOWN"
  slurmctld -f "$SLURM_CONF" -i
  slurmd -f "$SLURM_CONF"
  _wait_idle 1
  log "one-node cluster up ($h, state in $SLURM_TEST_DIR)"
}

_remove_netns() {  # ours only, by name (also leftovers of a killed earlier run)
  for n in "${NS_HOSTS[@]}"; do
    ip link del "v$n" 2>/dev/null || true
    ip netns del "$n" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  sed -i '/# batchcast-slurm-test$/d' /etc/hosts
  return 0
}

_make_netns() {
  _remove_netns
  ip link add "$BRIDGE" type bridge
  _netns_made=1
  ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local i=0
  for h in "${NS_HOSTS[@]}"; do
    i=$((i + 1))
    ip netns add "$h"
    ip link add "v$h" type veth peer name eth0 netns "$h"
    ip link set "v$h" master "$BRIDGE" up
    ip -n "$h" addr add "$SUBNET.1$i/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    echo "$SUBNET.1$i $h # batchcast-slurm-test" >>/etc/hosts
  done
}

cluster_start_two() {
  _start_munge
  _make_netns
  local h; h=$(hostname)
  _write_conf "$h" "$SUBNET.1" "NodeName=bcs[1-2] NodeAddr=$SUBNET.[11-12] CPUs=8 State=UNKNOWN"
  slurmctld -f "$SLURM_CONF" -i
  for n in "${NS_HOSTS[@]}"; do
    mkdir -p "$SLURM_TEST_DIR/tmp-$n"
    # nsenter, not `ip netns exec` (which remounts /sys and breaks slurmd); own UTS for the hostname.
    nsenter --net=/var/run/netns/"$n" unshare --uts --mount --propagation private sh -c \
      "hostname $n && mount --bind $SLURM_TEST_DIR/tmp-$n $SLURM_TEST_DIR/tmp && exec slurmd -f $SLURM_CONF -N $n"
  done
  _wait_idle 2
  log "two-node cluster up (${NS_HOSTS[*]}, state in $SLURM_TEST_DIR)"
}

_kill_pidfile() {  # pidfile
  [ -f "$1" ] || return 0
  local pid; pid=$(cat "$1" 2>/dev/null || true)
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || true
  timeout 10 sh -c "while kill -0 $pid 2>/dev/null; do sleep 0.1; done" || kill -9 "$pid" 2>/dev/null || true
}

cluster_stop() {
  set +e
  [ -f "$SLURM_TEST_DIR/slurmctld.pid" ] && timeout 10 scancel --full -u "$(id -un)" >/dev/null 2>&1
  for f in "$SLURM_TEST_DIR"/slurmd-*.pid; do _kill_pidfile "$f"; done
  _kill_pidfile "$SLURM_TEST_DIR/slurmctld.pid"
  [ "$_netns_made" = 1 ] && _remove_netns
  if [ "$_started_munge" = 1 ] && [ -f /run/munge/munged.pid ]; then
    _kill_pidfile /run/munge/munged.pid
  fi
  set -e
}
