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
# runtime loaded before anything else, and Debian's python3 is not built
# with it: preload the runtime the module links, and libstdc++ beside it
# (else ASan's __cxa_throw interceptor finds no real __cxa_throw, and the
# first C++ exception, in torch's autograd, aborts). The interpreter does
# not free all it allocates at exit, so leaks are not checked here (they
# are in the C++ tests, the daemons' included).
module_libraries=$(ldd "$PYTHONPATH"/distopt/_distopt*.so 2>/dev/null || true)
asan_runtime=$(awk '/libasan/ { print $3 }' <<<"$module_libraries")
if [ -n "$asan_runtime" ]; then
  cxx_runtime=$(awk '/libstdc\+\+/ { print $3 }' <<<"$module_libraries")
  export LD_PRELOAD="$asan_runtime${cxx_runtime:+:$cxx_runtime}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$1"
