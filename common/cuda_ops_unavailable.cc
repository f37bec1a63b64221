// Stands in for cuda_ops.cu when the build found no CUDA toolkit.
#include "common/cuda_ops.h"

namespace distopt {
namespace cuda_ops {
namespace {

constexpr char kBuiltWithoutCuda[] =
    "this binary was built without CUDA (no toolkit was found at build time)";

}  // namespace

bool BuiltWithCuda() { return false; }

std::string DeviceCount(int* count) {
  *count = 0;
  return kBuiltWithoutCuda;
}
std::string DeviceName(int, std::string*) { return kBuiltWithoutCuda; }
std::string Malloc(int, size_t, void**) { return kBuiltWithoutCuda; }
std::string Free(int, void*) { return kBuiltWithoutCuda; }
std::string CopyHostToDevice(int, void*, const void*, size_t) {
  return kBuiltWithoutCuda;
}
std::string CopyDeviceToHost(int, void*, const void*, size_t) {
  return kBuiltWithoutCuda;
}
std::string CopyDeviceToDevice(int, void*, const void*, size_t) {
  return kBuiltWithoutCuda;
}
std::string Add(int, void*, const void*, int, size_t) {
  return kBuiltWithoutCuda;
}
std::string Fill(int, void*, int, uint64_t, size_t) {
  return kBuiltWithoutCuda;
}
std::string Convert(int, void*, int, const void*, int, size_t) {
  return kBuiltWithoutCuda;
}
std::string MallocHost(size_t, void**) { return kBuiltWithoutCuda; }
std::string FreeHost(void*) { return kBuiltWithoutCuda; }
std::string DeviceUuid(int, std::string*) { return kBuiltWithoutCuda; }

}  // namespace cuda_ops
}  // namespace distopt
