#!/usr/bin/env bash
# Runs one pytest file as a user would: /usr/bin/python3 with the built
# package on PYTHONPATH (see python/BUILD.bazel).
set -euo pipefail
root="${TEST_SRCDIR:-$PWD}/distopt"
export PYTHONPATH="$root/python/pkg"
export DISTOPT_WORKER="$root/server/distopt_worker"
export GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=100
cd "$root"
# Built with --config=asan, the extension module needs AddressSanitizer's
# runtime preloaded (see asan_preload.sh). The interpreter does not free
# all it allocates at exit, so leaks are not checked here (they are in the
# C++ tests, the daemons' included).
preload=$("$root/python/tests/asan_preload.sh" "$PYTHONPATH")
if [ -n "$preload" ]; then
  export LD_PRELOAD="$preload"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$1"
