#!/usr/bin/env bash
# bazel run's entry to python_step_bench.py: the built package, worker and
# C++ probe from the runfiles, Debian's /usr/bin/python3.
set -euo pipefail
# Absolute: the script changes into it before Python reads PYTHONPATH.
root="$(cd "${RUNFILES_DIR:-$0.runfiles}/distopt" && pwd)"
export PYTHONPATH="$root/python/pkg"
export DISTOPT_WORKER="$root/server/distopt_worker"
export DISTOPT_CPP_PROBE="$root/python/cpp_step_probe"
cd "$root"
exec /usr/bin/python3 python/bench/python_step_bench.py "$@"
