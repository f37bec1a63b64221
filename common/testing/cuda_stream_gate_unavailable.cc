// Stands in for cuda_stream_gate.cu when the build found no CUDA toolkit.
#include "common/testing/cuda_stream_gate.h"

namespace distopt {
namespace testing {
namespace {

constexpr char kBuiltWithoutCuda[] = "this binary was built without CUDA";

}  // namespace

struct CudaStreamGate::State {};

CudaStreamGate::~CudaStreamGate() = default;
std::string CudaStreamGate::Hold(int, bool) { return kBuiltWithoutCuda; }
std::string CudaStreamGate::HoldOwnStream(int) { return kBuiltWithoutCuda; }
std::string CudaStreamGate::HoldCallingThreadStream(int) {
  return kBuiltWithoutCuda;
}
void CudaStreamGate::Open() {}
std::string CudaStreamGate::QueueCopyToDevice(void*, const void*, size_t) {
  return kBuiltWithoutCuda;
}

}  // namespace testing
}  // namespace distopt
