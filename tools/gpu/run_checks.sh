#!/usr/bin/env bash
# Runs on the GPU machine over a bundle from tools/gpu/bundle.sh: the CUDA
# tests (no longer skipped there), the data-parallel tests on GPU ranks,
# and the GPU halves of the optimizer and ZeRO benchmarks. Logs go to $OUT
# when the device tool sets it.
set -uo pipefail
cd "$(dirname "$0")/../.."
unpacked=$(mktemp -d)
xz -dc .gpu_bundle/bundle.tar.xz | tar -C "$unpacked" -xf - || exit 1
bundle=$unpacked/bundle
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# NCCL, if the toolkit lacks it: the copy PyTorch's wheels bring.
nccl=$(python3 -c 'import os, nvidia.nccl; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null) &&
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl"
# cuBLAS likewise (nvidia/<name>/lib in the wheels), after the toolkit's.
cublas=$(python3 -c 'import glob, os, nvidia; print(os.path.dirname(sorted(p for d in nvidia.__path__ for p in glob.glob(os.path.join(d, "*", "lib", "libcublas.so.*")))[0]))' 2>/dev/null) &&
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cublas"
export DISTOPT_WORKER_BINARY="$bundle/bin/distopt_worker"
export DISTOPT_TORCH_PYTHON=python3
# The tests find their data the way Bazel lays it out.
runfiles=$(mktemp -d)
mkdir -p "$runfiles/distopt/server/optim/testdata" "$runfiles/distopt/data/digits"
cp "$bundle/data/optimizer_golden.txt" "$runfiles/distopt/server/optim/testdata/"
cp "$bundle/data/digits.csv.gz" "$runfiles/distopt/data/digits/"
export TEST_SRCDIR=$runfiles TEST_TMPDIR=$(mktemp -d)
log=${OUT:-/tmp}/gpu_checks.log
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$log"
# What the binaries dlopen() (bundle.sh lists it) is not checked by the
# loader at start: find each here, or the CUDA tests fail one by one.
while read -r soname; do
  found=""
  for dir in ${LD_LIBRARY_PATH//:/ }; do
    if [ -e "$dir/$soname" ]; then found=$dir/$soname && break; fi
  done
  [ -n "$found" ] || found=$(ldconfig -p | awk -v name="$soname" '$1 == name {print $NF; exit}')
  echo "dlopen $soname: ${found:-NOT FOUND}" | tee -a "$log"
  [ -n "$found" ] || status=1
done <"$bundle/dlopened.txt"
for test in cuda_backend_test cuda_parity_test cuda_step_stream_test ops_test \
    nccl_communicator_test daemon_test digits_training_test \
    gpu_data_parallel_test; do
  echo "=== $test" | tee -a "$log"
  timeout 900 "$bundle/bin/$test" 2>&1 | tee "$log.$test" | grep -vE '^\[ (RUN|      OK) ' | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
# Here a skip is a failure (a binary built without CUDA skips them all),
# but for the test that needs two GPUs where there is one.
if grep -E '^\[  SKIPPED \] GpuDataParallelTest\.' "$log.gpu_data_parallel_test" |
    grep -v 'RanksOnTwoGpusRunNccl'; then
  echo "gpu_data_parallel_test skipped tests on a GPU machine" | tee -a "$log"
  status=1
fi
# Likewise the stream-ordering tests and the sliced step (each needs one
# GPU).
for must_run in cuda_step_stream_test:CudaStepStreamTest \
    cuda_parity_test:CudaStepSliceTest \
    cuda_backend_test:CudaBackendTest.OperationsWaitForTheirOwnStreamOnly \
    nccl_communicator_test:NcclCommunicatorTest.ACollectiveReadsWhatItsCallerQueuedBeforeIt; do
  if grep -E "^\[  SKIPPED \] ${must_run#*:}" "$log.${must_run%%:*}"; then
    echo "${must_run%%:*} skipped a test that needs one GPU on a GPU machine" | tee -a "$log"
    status=1
  fi
done
echo "=== optimizer_step_bench" | tee -a "$log"
"$bundle/bin/optimizer_step_bench" 2>&1 | tee -a "$log" || status=1
# The GPU half of the ZeRO benchmark (issue 19): two ranks sharing cuda:0,
# each mode, against a device-to-device copy of the model's bytes.
echo "=== zero_step_bench (GPU half)" | tee -a "$log"
"$bundle/bin/zero_step_bench" --benchmark_filter='BM_ZeroStepGpu' 2>&1 |
  tee -a "$log" || status=1
exit $status
