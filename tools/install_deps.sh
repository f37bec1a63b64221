#!/usr/bin/env bash
# Installs every Debian package that distopt's build, tests, demo and
# benchmarks need. Idempotent: when everything is present it changes nothing
# and does not touch the network. Run as root (or with sudo) on Debian 12.
#
#   tools/install_deps.sh               build, tests, demo, benchmarks
#
# Debian's PyTorch is always installed: the Python package's tests run
# against it, tools/golden/ draws reference values from it and bench/
# compares against it. (--with-torch, which used to add it, is accepted and
# changes nothing.)
set -euo pipefail

packages=(
  # Build
  bazel-bootstrap        # Bazel 4.2, offline
  g++
  protobuf-compiler      # protoc
  protobuf-compiler-grpc # grpc_cpp_plugin
  libprotobuf-dev
  libgrpc++-dev
  libabsl-dev
  libopenblas-dev
  libgloo-dev            # CPU collectives among data-parallel ranks
  zlib1g-dev             # the digits demo reads data/digits/digits.csv.gz
  libdeflate-dev         # checkpoints' crc32 (zlib's, with PCLMULQDQ)
  prometheus-cpp-dev     # the daemon's /metrics (--metrics_listen)
  # Tests and benchmarks
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  openssl                # tests/tls_test.cc makes its certificates with it
  prometheus             # tests/prometheus_test.cc scrapes two daemons with it
  munge                  # tests/slurm_test.sh: a one-node Slurm
  slurmctld
  slurmd
  slurm-client
  iproute2               # tests/multi_host_test.cc: namespaces, tc
  etcd-server            # --rendezvous=etcd://: server/comm's and tests/ etcd tests
  etcd-client            # etcdctl: tests/slurm_test.sh reads the ranks' records
  # --config=asan and the fuzzers (tests/fuzz, tools/fuzz/run_fuzzers.sh,
  # --config=fuzz): clang and its libFuzzer and sanitizer runtimes. g++
  # brings TSan for --config=tsan.
  clang-14
  libclang-rt-14-dev
  # The Python package (python/) and its tests
  python3-dev
  pybind11-dev
  python3-numpy
  python3-pytest
  python3-yaml           # deploy/kubernetes/manifests_test.py reads the manifests
  python3-torch
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null |
      grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install_deps: done"
