#!/usr/bin/env bash
# A single-node Slurm on this machine, for tests: slurmctld and slurmd as
# root, state and logs under DIR (default: a new temp dir). Prints the
# `export SLURM_CONF=...` line that srun/sinfo/scontrol need; stop it with
# scripts/slurm/stop.sh DIR. Needs Debian's slurm-wlm (and munge, which it
# pulls in). ERDMA_SLURM_CONF_EXTRA: lines added to slurm.conf (e.g. a
# HealthCheckProgram). Exit status: 0 the node is idle, 1 it did not come up (the
# logs' tails are printed).
set -euo pipefail
DIR=${1:-$(mktemp -d /tmp/erdma-slurm.XXXXXX)}
mkdir -p "$DIR"/ctld "$DIR"/d
DIR=$(cd "$DIR" && pwd)
HOST=$(hostname -s)
# More tasks than cores: a test starts 2+ ranks on a 2-core machine. The
# node claims 8 CPUs and config_overrides makes slurmd accept the claim.
CPUS=$(( $(nproc) > 8 ? $(nproc) : 8 ))
PORT=${ERDMA_SLURM_PORT:-6817}
cat >"$DIR/slurm.conf" <<CONF
ClusterName=erdma-test
SlurmctldHost=$HOST
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/d
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
[[ -n ${ERDMA_SLURM_CONF_EXTRA:-} ]] && printf '%s\n' "$ERDMA_SLURM_CONF_EXTRA" >>"$DIR/slurm.conf"
export SLURM_CONF=$DIR/slurm.conf

# munged: Slurm's authentication; started once, left running for later jobs.
if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge && chown munge: /run/munge 2>/dev/null || true
  if id munge >/dev/null 2>&1; then
    su -s /bin/sh munge -c /usr/sbin/munged || /usr/sbin/munged --force
  else
    /usr/sbin/munged --force
  fi
fi

slurmctld -f "$SLURM_CONF" -i
slurmd -f "$SLURM_CONF" -N "$HOST"

# Bounded wait for the node to be idle (slurmd registered).
for _ in $(seq 1 60); do
  if [[ $(sinfo -h -n "$HOST" -o %t 2>/dev/null) == idle ]]; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.5
done
echo "scripts/slurm/start.sh: node $HOST not idle after 30 s (sinfo: $(sinfo -h -o '%n %t' 2>&1)); logs in $DIR" >&2
tail -5 "$DIR"/slurmctld.log "$DIR"/slurmd.log >&2 || true
exit 1
