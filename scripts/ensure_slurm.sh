#!/usr/bin/env bash
# A one-host Slurm for the tests: munge, slurmdbd (accounting in the local MariaDB, so
# `sacct` answers as on a real cluster), slurmctld and three slurmd on this machine:
# partition `debug` (default) is this host as one CPU node with its cores and memory;
# partition `multi` is two more nodes, tdnode1 and tdnode2, each a slurmd of its own on its
# own port (slurmd -N), so a job on two nodes runs here as on a cluster. Installs Debian's
# packages where they are missing (root). Idempotent: when `sinfo` already shows the nodes,
# it returns at once.
#
# TUNEDECK_SLURM_TEST=0 skips it (a laptop without root); tests that need Slurm then skip.
set -euo pipefail

if [[ "${TUNEDECK_SLURM_TEST:-1}" == "0" ]]; then
  echo "TUNEDECK_SLURM_TEST=0: no Slurm started"; exit 0
fi

CONF_DIR=/etc/slurm
STATE_DIR=/var/lib/tunedeck-slurm
LOG_DIR=/var/log/tunedeck-slurm
NODE=$(hostname -s)
PARTITION=debug

MULTI_NODES=(tdnode1 tdnode2)
MULTI_PORTS=(17001 17002)

node_state() { sinfo -h -N -n "$1" -o %T 2>/dev/null | sed -n 1p || true; }

node_up() {
  local state
  state=$(node_state "$1")
  [[ "$state" == idle* || "$state" == mixed* || "$state" == allocated* ]]
}

ready() {
  local node
  for node in "$NODE" "${MULTI_NODES[@]}"; do node_up "$node" || return 1; done
}

if command -v sinfo >/dev/null 2>&1 && ready; then
  echo "Slurm answers: nodes $NODE ${MULTI_NODES[*]} up"; exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "ensure_slurm.sh: starting Slurm needs root (or set TUNEDECK_SLURM_TEST=0)" >&2; exit 1
fi

missing=()
for command in munged slurmctld slurmd slurmdbd sbatch; do
  command -v "$command" >/dev/null 2>&1 || missing+=("$command")
done
if (( ${#missing[@]} )); then
  echo "installing Slurm (missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
  apt-get -o DPkg::Lock::Timeout=600 install -y -q slurm-wlm slurmdbd munge >/dev/null
fi

mkdir -p "$STATE_DIR/ctld" "$LOG_DIR" /run/munge
chown -R slurm:slurm "$STATE_DIR" "$LOG_DIR"

# munge: the key is the cluster's shared secret; one host makes its own.
if [[ ! -s /etc/munge/munge.key ]]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge/munge.key /run/munge
chmod 400 /etc/munge/munge.key
if ! munge -n >/dev/null 2>&1; then
  mkdir -p /var/log/munge /var/lib/munge
  chown munge:munge /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged --force
  for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
fi

# slurmdbd's database in the local MariaDB (root over its socket, as Debian sets it up).
DB_PASSWORD=tunedeck-slurm-test
if command -v mariadb >/dev/null 2>&1 && mariadb -uroot -e "select 1" >/dev/null 2>&1; then
  mariadb -uroot <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASSWORD';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL
  ACCOUNTING="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux"
else
  echo "no MariaDB answers: Slurm runs without accounting (no sacct)"
  ACCOUNTING="AccountingStorageType=accounting_storage/none"
fi

# The node as slurmd sees it, less 1 GB of memory for the services beside it.
read -r CPUS MEMORY < <(slurmd -C | awk '{for (i = 1; i <= NF; i++) {
  split($i, kv, "="); if (kv[1] == "CPUs") c = kv[2]; if (kv[1] == "RealMemory") m = kv[2] }}
  END { print c, m }')
MEMORY=$(( MEMORY > 2048 ? MEMORY - 1024 : MEMORY ))

cat > "$CONF_DIR/slurm.conf" <<CONF
# Written by TuneDeck's scripts/ensure_slurm.sh: a one-host cluster for its tests.
ClusterName=tunedeck
SlurmctldHost=$NODE
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SlurmUser=slurm
SlurmdUser=root
StateSaveLocation=$STATE_DIR/ctld
# %n: each slurmd of this host (one a node) has its own spool, pid and log.
SlurmdSpoolDir=$STATE_DIR/d-%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
# The two-node partition's nodes share this host's cores: take the configured CPUs as given.
SlurmdParameters=config_overrides
ReturnToService=2
# A job past its time limit is killed within a minute; its ranks get 10 s after SIGTERM.
KillWait=10
OverTimeLimit=0
InactiveLimit=0
MinJobAge=300
$ACCOUNTING
NodeName=$NODE CPUs=$CPUS RealMemory=$MEMORY State=UNKNOWN
NodeName=${MULTI_NODES[0]} NodeHostname=$NODE NodeAddr=127.0.0.1 Port=${MULTI_PORTS[0]} CPUs=1 RealMemory=2048 State=UNKNOWN
NodeName=${MULTI_NODES[1]} NodeHostname=$NODE NodeAddr=127.0.0.1 Port=${MULTI_PORTS[1]} CPUs=1 RealMemory=2048 State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=multi Nodes=${MULTI_NODES[0]},${MULTI_NODES[1]} MaxTime=INFINITE State=UP
CONF

if [[ "$ACCOUNTING" == *slurmdbd* ]]; then
  cat > "$CONF_DIR/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASSWORD
StorageLoc=slurm_acct_db
LogFile=$LOG_DIR/slurmdbd.log
PidFile=/run/slurmdbd.pid
CONF
  chown slurm:slurm "$CONF_DIR/slurmdbd.conf"
  chmod 600 "$CONF_DIR/slurmdbd.conf"
  if ! pgrep -x slurmdbd >/dev/null; then
    /usr/sbin/slurmdbd
    for _ in $(seq 100); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
  fi
  # slurmctld registers a cluster only once it is known to the database.
  sacctmgr -i add cluster tunedeck >/dev/null 2>&1 || true
fi

# A running controller and daemons of an older configuration start over on this one.
pkill -x slurmd 2>/dev/null || true
pkill -x slurmctld 2>/dev/null && sleep 1 || true
/usr/sbin/slurmctld
for node in "$NODE" "${MULTI_NODES[@]}"; do
  mkdir -p "$STATE_DIR/d-$node"
  /usr/sbin/slurmd -N "$node"
done

for _ in $(seq 150); do
  if ready; then
    echo "Slurm answers: node $NODE (partition $PARTITION), ${MULTI_NODES[*]} (partition multi)"
    exit 0
  fi
  # A node that was down (an earlier run) comes back once told to.
  for node in "$NODE" "${MULTI_NODES[@]}"; do
    [[ "$(node_state "$node")" == down* ]] && scontrol update nodename="$node" state=resume 2>/dev/null || true
  done
  sleep 0.2
done
echo "ensure_slurm.sh: the nodes did not come up; sinfo says:" >&2
sinfo -N >&2 || true
tail -5 "$LOG_DIR"/*.log >&2 || true
exit 1
