#!/usr/bin/env bash
# Prints what LD_PRELOAD must hold for Debian's python3 to import the
# package in folder $1 when it was built with --config=asan (nothing
# otherwise): AddressSanitizer's runtime, which must be loaded before
# anything else and python3 is not built with, and libstdc++ beside it
# (else ASan's __cxa_throw interceptor finds no real __cxa_throw, and the
# first C++ exception, in torch's autograd, aborts). clang (--config=asan)
# links no runtime into a shared library: the module then only refers to
# __asan_init, found in clang's shared runtime. g++ links libasan.
module=$(ls "$1"/distopt/_distopt*.so 2>/dev/null | head -n 1)
[ -n "$module" ] || exit 0
module_libraries=$(ldd "$module" 2>/dev/null || true)
asan_runtime=$(awk '/libasan/ { print $3 }' <<<"$module_libraries")
if [ -z "$asan_runtime" ] &&
   nm -D --undefined-only "$module" 2>/dev/null | grep -q ' __asan_init$'; then
  asan_runtime=$(clang-14 -print-file-name=libclang_rt.asan-x86_64.so)
fi
if [ -n "$asan_runtime" ]; then
  cxx_runtime=$(awk '/libstdc\+\+/ { print $3 }' <<<"$module_libraries")
  echo "$asan_runtime${cxx_runtime:+:$cxx_runtime}"
fi
