#!/usr/bin/env bash
# Starts N distopt daemons on this machine as the ranks of one data-parallel
# group (ZeRO, post-local SGD): rank 0 first, the others joining through its
# store; prints each rank's address. Ctrl-C stops them all gracefully.
#   deploy/local/run_ranks.sh 4 [extra worker flags...]
set -euo pipefail
world=${1:-2}
shift || true
binary=${DISTOPT_WORKER:-bazel-bin/server/distopt_worker}
if [ ! -x "$binary" ]; then
  echo "build it first: bazel build //server:distopt_worker" >&2
  exit 1
fi
dir=$(mktemp -d)
# The group's secret: only the ranks may use the group's store.
(umask 077 && head -c 32 /dev/urandom | base64 > "$dir/group_secret")
pids=()
stop() {
  # The last rank first: every rank holds a connection to rank 0's store.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[$i]}" 2>/dev/null || true
    wait "${pids[$i]}" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap stop EXIT INT TERM
start_rank() {
  "$binary" --listen=127.0.0.1:0 --port_file="$dir/$1" --rank="$1" \
    --world_size="$world" --group_secret_file="$dir/group_secret" \
    "${@:2}" >/dev/null &
  pids+=($!)
  until [ -s "$dir/$1" ]; do
    kill -0 "${pids[$1]}" 2>/dev/null || { echo "rank $1 failed" >&2; exit 1; }
    sleep 0.05
  done
}
# Rank 0 serves the group's store; its own --rendezvous is not used.
start_rank 0 --rendezvous=127.0.0.1:1 "$@"
for ((r = 1; r < world; r++)); do
  start_rank "$r" --rendezvous="$(cat "$dir/0")" "$@"
done
for ((r = 0; r < world; r++)); do
  echo "rank $r: $(cat "$dir/$r")"
done
echo "press Ctrl-C to stop"
wait
