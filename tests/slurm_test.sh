#!/usr/bin/env bash
# deploy/slurm's batch scripts under a real Slurm: a one-node cluster made
# of Debian's packages (munge, slurmctld, slurmd; processes tracked by
# linuxproc, no cgroups), started here and shut down at the end. Each job
# runs with sbatch --wait:
#   distopt_ranks.sbatch (twice: through rank 0's store, then through
#     etcd, Debian's etcd-server started by the test): 4 ranks form a group, and a trainer per rank
#     (deploy/slurm/train_digits_ranks.py) trains with ZeRO (every rank ends
#     with the same bytes, the loss falls), then post-local SGD (averaging
#     every 4 steps, the same bytes after the last); the daemons stop
#     gracefully and the job exits 0.
#   distopt_workers.sbatch: 2 workers on the CPU, and the digits demo
#     trains on them through DistributedOptimizer (held-out accuracy at
#     least 0.8); the job exits 0.
# Needs root (slurmd); Bazel runs it unsandboxed and alone.
set -euo pipefail
root="${TEST_SRCDIR:-$PWD}/distopt"
cd "$root"
export DISTOPT_WORKER="$root/server/distopt_worker"
export PYTHONPATH="$root/python/pkg"
export GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=100
fail() { echo "FAIL: $*" >&2; exit 1; }
# The trainers' python3, with the ASan runtime preloaded when the package
# was built with --config=asan (python/tests/asan_preload.sh).
python=(/usr/bin/python3)
preload=$(python/tests/asan_preload.sh "$PYTHONPATH")
if [ -n "$preload" ]; then
  python=(/usr/bin/env "LD_PRELOAD=$preload"
          "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
          /usr/bin/python3)
fi
for tool in munged slurmctld slurmd sbatch sinfo scontrol etcd; do
  command -v "$tool" >/dev/null ||
    fail "$tool is missing: tools/install_deps.sh installs Slurm, munge and etcd"
done
[ "$(id -u)" -eq 0 ] || fail "needs root (slurmd starts the jobs' tasks)"

# In /tmp: munge's socket path must fit in 108 bytes, and Bazel's
# TEST_TMPDIR is longer than that.
dir=$(mktemp -d /tmp/distopt-slurm.XXXXXX)
chmod 755 "$dir"
started=$(date +%s)
cleanup() {
  set +e
  [ -s "$dir/slurmctld.pid" ] &&
    SLURM_CONF="$dir/slurm.conf" timeout 10 scontrol shutdown >/dev/null 2>&1
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid \
    "$dir"/etcd.pid; do
    [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
  done
  sleep 1
  rm -rf "$dir"
}
trap cleanup EXIT

# munge: a key of its own and a socket in the folder.
head -c 1024 /dev/urandom > "$dir/munge.key"
chmod 400 "$dir/munge.key"
munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" \
  --log-file="$dir/munged.log" --pid-file="$dir/munged.pid" \
  --seed-file="$dir/munged.seed"

# Slurm: this machine as the one node, with more CPUs than it has
# (config_overrides) so that 4 ranks and their trainers fit.
node=$(hostname -s)
port=$((20000 + $$ % 20000))
mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" <<CONF
ClusterName=distopttest
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -i
slurmd
for _ in $(seq 150); do
  [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break
  sleep 0.2
done
[ "$(sinfo -h -o %T)" = idle ] ||
  fail "the node never became idle: $(sinfo 2>&1); $(tail -5 "$dir/slurmctld.log" "$dir/slurmd.log")"
echo "slurm up in $(($(date +%s) - started)) s"

# --- The ranks of a group, trained by a trainer per rank: joined through
# rank 0's store ($1 = ranks), then through etcd ($1 = ranks_etcd, with
# DISTOPT_ETCD in the job's environment, $2).
run_ranks_job() {
  local name=$1 exports=$2
  local t0
  t0=$(date +%s)
  mkdir "$dir/$name"
  sbatch --wait -N1 --ntasks-per-node=4 -o "$dir/$name.out" \
    --export=ALL,DISTOPT_ADDRESS_DIR="$dir/$name$exports" \
    deploy/slurm/distopt_ranks.sbatch \
    "${python[@]}" deploy/slurm/train_digits_ranks.py \
    --addresses="$dir/$name" --steps=12 --period=4 ||
    fail "the $name job failed: $(cat "$dir/$name.out")"
  echo "$name job: $(($(date +%s) - t0)) s"
  local out="$dir/$name.out"
  grep -E '^(zero|local_sgd) ' "$out"
  [ "$(grep -c '^zero ' "$out")" -eq 4 ] ||
    fail "$name: expected 4 ZeRO trainers: $(cat "$out")"
  [ "$(grep '^zero ' "$out" | grep -o 'checksum=[0-9a-f]*' | sort -u | wc -l)" -eq 1 ] ||
    fail "$name: the ranks differ after ZeRO"
  grep '^zero ' "$out" | grep -o 'loss=[0-9.]*->[0-9.]*' |
    awk -F'[=>-]' '{ if ($3 >= $2) { print "loss did not fall: " $0; exit 1 } }' ||
    fail "$name: a rank's loss did not fall"
  [ "$(grep -c '^local_sgd .* averaged_at=0,4,8,12 ' "$out")" -eq 4 ] ||
    fail "$name: post-local SGD did not average at steps 0, 4, 8, 12 on every rank"
  [ "$(grep '^local_sgd ' "$out" | grep -o 'checksum=[0-9a-f]*' | sort -u | wc -l)" -eq 1 ] ||
    fail "$name: the ranks differ after the last averaging"
  [ "$(grep -c 'msg="stopped"' "$out")" -eq 4 ] ||
    fail "$name: the ranks did not all stop gracefully"
}
run_ranks_job ranks ""

# etcd, one member on loopback, for the same job with DISTOPT_ETCD.
etcd_ports=$(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
read -r etcd_port etcd_peer_port <<<"$etcd_ports"
etcd --name=slurm-test --data-dir="$dir/etcd" \
  --listen-client-urls="http://127.0.0.1:$etcd_port" \
  --advertise-client-urls="http://127.0.0.1:$etcd_port" \
  --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster="slurm-test=http://127.0.0.1:$etcd_peer_port" \
  --log-level=error >"$dir/etcd.log" 2>&1 &
echo $! > "$dir/etcd.pid"
for _ in $(seq 150); do
  ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$etcd_port" endpoint health \
    >/dev/null 2>&1 && break
  sleep 0.2
done
run_ranks_job ranks_etcd ",DISTOPT_ETCD=etcd://127.0.0.1:$etcd_port"
# Every rank published itself in etcd, under the job's id.
published=$(ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$etcd_port" get \
  --prefix /distopt/slurm- --keys-only | grep -c '/incarnations/')
[ "$published" -eq 4 ] ||
  fail "expected the 4 ranks' records in etcd, found $published"

# --- Parameter-server workers on the CPU, and the digits demo on them.
t0=$(date +%s)
mkdir "$dir/workers"
sbatch --wait -N1 --ntasks-per-node=2 --gpus-per-task=0 \
  -o "$dir/workers.out" \
  --export=ALL,DISTOPT_ADDRESS_DIR="$dir/workers",DISTOPT_DEVICE=cpu \
  deploy/slurm/distopt_workers.sbatch \
  "${python[@]}" python/examples/digits.py --epochs=3 ||
  fail "the workers' job failed: $(cat "$dir/workers.out")"
echo "workers job: $(($(date +%s) - t0)) s"
grep -E '^(epoch|held-out)' "$dir/workers.out"
accuracy=$(grep -o 'held-out accuracy [0-9.]*' "$dir/workers.out" | awk '{print $3}')
[ -n "$accuracy" ] || fail "no accuracy: $(cat "$dir/workers.out")"
awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.8) }' ||
  fail "held-out accuracy $accuracy, expected at least 0.8"
[ "$(grep -c 'msg="stopped"' "$dir/workers.out")" -eq 2 ] ||
  fail "the workers did not both stop gracefully"
echo "PASS in $(($(date +%s) - started)) s"
