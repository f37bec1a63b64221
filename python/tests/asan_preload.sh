#!/usr/bin/env bash
# Prints what LD_PRELOAD must hold for Debian's python3 to import the
# package in folder $1 when it was built with --config=asan (nothing
# otherwise): the ASan runtime the extension module links (g++'s libasan
# or, as .bazelrc builds it, clang's shared runtime), which must be loaded
# before anything else and python3 is not built with, and libstdc++ beside
# it (else ASan's __cxa_throw interceptor finds no real __cxa_throw, and
# the first C++ exception, in torch's autograd, aborts). The daemons the
# tests start link the same runtime, so the preload they inherit is theirs.
module_libraries=$(ldd "$1"/distopt/_distopt*.so 2>/dev/null || true)
asan_runtime=$(awk '/libasan|libclang_rt\.asan/ { print $3 }' <<<"$module_libraries")
if [ -n "$asan_runtime" ]; then
  cxx_runtime=$(awk '/libstdc\+\+/ { print $3 }' <<<"$module_libraries")
  echo "$asan_runtime${cxx_runtime:+:$cxx_runtime}"
fi
