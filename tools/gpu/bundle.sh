#!/usr/bin/env bash
# Builds the CUDA tests and GPU benchmarks here and packs them, with the
# shared libraries they need that a bare GPU machine lacks (gRPC, Abseil,
# protobuf, OpenBLAS, ...), into .gpu_bundle/bundle.tar.xz for the device
# tool:
#
#   bash tools/gpu/bundle.sh                    # .gpu_bundle/ is git-ignored
#   device run, carry [".gpu_bundle"]:  bash tools/gpu/run_checks.sh
#
# The CUDA libraries themselves (cudart is static; cuBLAS, NCCL) come from
# the GPU machine: its toolkit at /usr/local/cuda, or the copies that ship
# with its PyTorch (run_checks.sh looks for both). They cannot travel:
# libcublas and libcublasLt alone are 570 MiB, about 400 MiB compressed,
# against the 64 MiB the device tool carries. cuBLAS and NCCL are opened
# with dlopen() on first use (server/autograd/cublas_library.h,
# server/comm/nccl_library.h), so ldd does not list them:
# the bundle names the sonames the binaries open, in dlopened.txt, and
# run_checks.sh finds each before any test runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=(
  //common:cuda_backend_test
  //server/optim:cuda_parity_test
  //server/optim:cuda_step_stream_test
  //server/autograd:ops_test
  //server/comm:nccl_communicator_test
  //tests:daemon_test
  //tests:digits_training_test
  //tests:gpu_data_parallel_test
  //server:distopt_worker
  //bench:optimizer_step_bench
  //bench:zero_step_bench
)
# Static linking of the project's own libraries: the binaries move alone.
bazel build -c opt --dynamic_mode=off "${targets[@]}"
out=$(mktemp -d)/bundle
mkdir -p "$out/bin" "$out/lib" "$out/data"
for target in "${targets[@]}"; do
  path=${target#//}
  cp "bazel-bin/${path%%:*}/${path##*:}" "$out/bin/"
done
cp server/optim/testdata/optimizer_golden.txt data/digits/digits.csv.gz \
  "$out/data/"
# Every shared library outside glibc and the CUDA toolkit.
for binary in "$out"/bin/*; do
  ldd "$binary" | awk '/=> \//{print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libcublas[^/]*|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
# The sonames in the binaries that dlopen() takes (cuBLAS, NCCL), with
# what libcublas itself needs beside it (libcublasLt of the same version).
{ grep -aohE 'lib(cublas|nccl)\.so\.[0-9]+' "$out"/bin/* || true; } | sort -u |
  sed -E 's/^libcublas(\.so\..*)$/&\nlibcublasLt\1/' >"$out/dlopened.txt"
# Compressed, to stay well inside the 64 MiB that travels.
rm -rf .gpu_bundle
mkdir -p .gpu_bundle
tar -C "$(dirname "$out")" -cf - bundle | xz -T2 -6 > .gpu_bundle/bundle.tar.xz
du -sh .gpu_bundle/bundle.tar.xz
