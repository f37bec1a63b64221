#!/usr/bin/env bash
# Starts N distopt workers on this machine (loopback, free ports) and prints
# their addresses; Ctrl-C stops them all gracefully.
#   deploy/local/run_workers.sh 2 [extra worker flags...]
set -euo pipefail
count=${1:-1}
shift || true
binary=${DISTOPT_WORKER:-bazel-bin/server/distopt_worker}
if [ ! -x "$binary" ]; then
  echo "build it first: bazel build //server:distopt_worker" >&2
  exit 1
fi
dir=$(mktemp -d)
pids=()
stop() {
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait
  rm -rf "$dir"
}
trap stop EXIT INT TERM
for ((i = 0; i < count; i++)); do
  "$binary" --listen=127.0.0.1:0 --port_file="$dir/$i" "$@" >/dev/null &
  pids+=($!)
done
for ((i = 0; i < count; i++)); do
  until [ -s "$dir/$i" ]; do
    kill -0 "${pids[$i]}" 2>/dev/null || { echo "worker $i failed" >&2; exit 1; }
    sleep 0.05
  done
  echo "worker $i: $(cat "$dir/$i")"
done
echo "press Ctrl-C to stop"
wait
