#!/usr/bin/env bash
# Runs one pytest file as a user would: /usr/bin/python3 with the built
# package on PYTHONPATH (see python/BUILD.bazel).
set -euo pipefail
root="${TEST_SRCDIR:-$PWD}/distopt"
export PYTHONPATH="$root/python/pkg"
export DISTOPT_WORKER="$root/server/distopt_worker"
export GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=100
cd "$root"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$1"
